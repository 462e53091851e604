# shellcheck shell=bash
# Debian and Ubuntu roots made with debootstrap, for scripts/compat (other
# PHPs) and scripts/fresh-root (the README's two commands on a fresh Debian
# 12). Source it; it defines functions only (scripts/tests/mirrors sources it
# without root):
#
#   host_mirror DISTRO            the archive mirror of debian|ubuntu: the
#                                 variable CRONLOCK_DEBIAN_MIRROR /
#                                 CRONLOCK_UBUNTU_MIRROR, else read from this
#                                 host's apt sources; stops with what to set
#   apt_archive_uri ORIGIN SUITE [ETC LISTS]   the reader behind it
#   root_private_mounts "$@"      re-runs the calling script in a mount
#                                 namespace of its own (once): every mount it
#                                 makes is gone when it ends, whatever way
#   root_bootstrap ROOT DISTRO SUITE MIRROR COMPONENTS VARIANT [SCRIPT]
#                                 debootstrap, with the root's own
#                                 sources.list, policy-rc.d and /etc/hosts
#   root_mount ROOT               /proc /sys /dev /dev/pts /dev/shm, tmpfs
#                                 /run (with /run/lock) and /tmp, resolv.conf
#   root_bind SRC DEST [mount options…]
#   root_rust ROOT shared|fresh   Rust from this host's rustup: its
#                                 toolchains read-only (fresh: and an empty
#                                 CARGO_HOME of the root's own) or this
#                                 host's CARGO_HOME and RUSTUP_HOME (shared)
#   in_root ROOT CMD…             CMD in the root as root, environment made
#                                 from scratch (what a login shell would have)
#   copy_tree SRC DEST            the checkout SRC as a clone would have it
#                                 plus untracked files (not ignored ones)
#   root_processes ROOT           pids of the processes whose root is ROOT
#   root_unmount ROOT             every mount under ROOT, deepest first

# the calling script as its users type it (scripts/compat), for messages
_roots_me() {
    realpath -m --relative-to="$(dirname "${BASH_SOURCE[0]}")/.." "$0" 2>/dev/null || printf '%s\n' "${0##*/}"
}

# ---------------------------------------------------------------- mirrors

# host_mirror debian|ubuntu: prints the URL debootstrap and apt take (the
# directory that holds dists/ and pool/), or says exactly what to set and
# returns 1. The variable wins; else the host's own apt sources name it when
# the host is that distribution (its release's suite, component main, the
# archive apt's lists say is Debian's or Ubuntu's). A Debian host has nothing
# to say about Ubuntu's mirrors, and the other way round.
host_mirror() { # DISTRO [OS_RELEASE ETC LISTS] (the rest: for scripts/tests/mirrors)
    local distro="$1" os_release="${2:-/etc/os-release}" etc="${3:-}" lists="${4:-}"
    local var origin id name codename uri
    case "$distro" in
        debian) var=CRONLOCK_DEBIAN_MIRROR origin=Debian ;;
        ubuntu) var=CRONLOCK_UBUNTU_MIRROR origin=Ubuntu ;;
        *) echo "host_mirror: unknown distribution '$distro'" >&2; return 2 ;;
    esac
    if [[ -n "${!var:-}" ]]; then
        printf '%s\n' "${!var%/}"
        return 0
    fi
    id="$(. "$os_release" 2>/dev/null && echo "${ID:-}")"
    name="$(. "$os_release" 2>/dev/null && echo "${PRETTY_NAME:-${ID:-}}")"
    codename="$(. "$os_release" 2>/dev/null && echo "${VERSION_CODENAME:-}")"
    if [[ "$id" != "$distro" || -z "$codename" ]]; then
        printf '%s: this host is %s: its apt sources name no %s archive. Set %s to the URL of a mirror of %s (the directory that holds dists/ and pool/) and run again.\n' \
            "$(_roots_me)" "${name:-neither Debian nor Ubuntu}" "$origin" "$var" "$origin" >&2
        return 1
    fi
    if ! uri="$(apt_archive_uri "$origin" "$codename" "$etc" "$lists")"; then
        printf '%s: the apt sources of this host name no %s archive for %s (component main). Set %s to the URL of a mirror of %s (the directory that holds dists/ and pool/) and run again.\n' \
            "$(_roots_me)" "$origin" "$codename" "$var" "$origin" >&2
        return 1
    fi
    printf '%s\n' "$uri"
}

# apt_archive_uri ORIGIN SUITE [ETC LISTS]: the URI of the first enabled
# "deb" entry of apt's sources that lists SUITE with component main, in apt's
# order (sources.list, then sources.list.d/ by name; one-line *.list files and
# deb822 *.sources files). When several do (a third-party archive such as a
# PHP backports one often reuses the release's name), the first whose Release
# file in apt's lists says "Origin: ORIGIN" wins. ETC: apt's configuration
# directory (default: what apt-config says, else /etc/apt); LISTS: apt's lists
# (default: /var/lib/apt/lists).
apt_archive_uri() {
    local origin="$1" suite="$2" etc="${3:-}" lists="${4:-/var/lib/apt/lists}"
    local -a files=() candidates=()
    local main parts uri name SL SP
    if [[ -n "$etc" ]]; then
        main="$etc/sources.list" parts="$etc/sources.list.d"
    elif command -v apt-config >/dev/null 2>&1 && eval "$(apt-config shell SL Dir::Etc::sourcelist/f SP Dir::Etc::sourceparts/d)"; then
        main="${SL:-/etc/apt/sources.list}" parts="${SP:-/etc/apt/sources.list.d}"
    else
        main=/etc/apt/sources.list parts=/etc/apt/sources.list.d
    fi
    [[ -f "$main" ]] && files+=("$main")
    mapfile -t -O "${#files[@]}" files < <(find "$parts" -maxdepth 1 -type f \( -name '*.list' -o -name '*.sources' \) 2>/dev/null | LC_ALL=C sort)
    ((${#files[@]})) || return 1
    mapfile -t candidates < <(for f in "${files[@]}"; do _apt_entries "$f"; done \
        | awk -v suite="$suite" '$1 == "deb" && $3 == suite && $4 == "main" { print $2 }' | awk '!seen[$0]++')
    ((${#candidates[@]})) || return 1
    for uri in "${candidates[@]}"; do
        name="$(_apt_list_name "$uri")_dists_${suite}_"
        if grep -qsx "Origin: $origin" "$lists/${name}InRelease" "$lists/${name}Release"; then
            printf '%s\n' "${uri%/}"
            return 0
        fi
    done
    printf '%s\n' "${candidates[0]%/}"
}

# _apt_entries FILE: one line "TYPE URI SUITE COMPONENT" per enabled
# combination, from a one-line (*.list, sources.list) or deb822 (*.sources)
# file. Only http, https and file URIs (what debootstrap takes).
_apt_entries() {
    local f="$1"
    if [[ "$f" == *.sources ]]; then
        # deb822: stanzas between blank lines; "Field: value" with
        # continuation lines starting with a blank; names case-insensitive
        awk '
            function flush(   nt, nu, ns, nc, t, u, s, c, T, U, S, C) {
                if (tolower(enabled) != "no") {
                    nt = split(types, T, " "); nu = split(uris, U, " ")
                    ns = split(suites, S, " "); nc = split(comps, C, " ")
                    for (t = 1; t <= nt; t++) for (u = 1; u <= nu; u++)
                        for (s = 1; s <= ns; s++) for (c = 1; c <= nc; c++)
                            print T[t], U[u], S[s], C[c]
                }
                types = uris = suites = comps = field = ""; enabled = "yes"
            }
            BEGIN { enabled = "yes" }
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { flush(); next }
            /^[ \t]/ { value = $0; sub(/^[ \t]+/, "", value); add(field, value); next }
            {
                field = tolower($0); sub(/:.*/, "", field)
                value = $0; sub(/^[^:]*:[ \t]*/, "", value)
                if (field == "enabled") enabled = value
                add(field, value)
            }
            function add(name, v) {
                if (name == "types") types = types " " v
                else if (name == "uris") uris = uris " " v
                else if (name == "suites") suites = suites " " v
                else if (name == "components") comps = comps " " v
            }
            END { flush() }
        ' "$f"
    else
        # one-line: "deb [ option=value … ] URI SUITE COMPONENT…", "#" comments
        sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" \
            | awk 'NF >= 4 { for (c = 4; c <= NF; c++) print $1, $2, $3, $c }'
    fi | awk '$2 ~ /^(https?|file):/'
}

# _apt_list_name URI: the prefix apt gives the files of URI in its lists
# (scheme and user dropped, "/" as "_"), e.g. http://host/debian ->
# host_debian
_apt_list_name() {
    local uri="${1%/}"
    uri="${uri#*://}"
    uri="${uri#*@}"
    printf '%s\n' "${uri//\//_}"
}

# ---------------------------------------------------------------- the root

# root_private_mounts "$@": the first call re-executes the calling script
# under unshare(1) in a mount namespace of its own, private propagation; the
# mounts it makes are seen by it and its children only and vanish with them
# (no unmounting on the way out, no mount left behind by a killed run, no
# interference between two runs on one root).
root_private_mounts() {
    [[ -n "${CRONLOCK_PRIVATE_MOUNTS:-}" ]] && return 0
    command -v unshare >/dev/null 2>&1 || { echo "$(_roots_me): needs unshare (util-linux)" >&2; exit 1; }
    CRONLOCK_PRIVATE_MOUNTS=1 exec unshare --mount --propagation private -- "$0" "$@"
}

# root_bootstrap ROOT DISTRO SUITE MIRROR COMPONENTS VARIANT [SCRIPT]:
# debootstrap SUITE of DISTRO (debian, ubuntu) from MIRROR into ROOT
# (VARIANT: minbase, or "" for debootstrap's default: the required and
# important packages, as an installed system has; SCRIPT: debootstrap's
# script for SUITE when it has none of that name), with ca-certificates
# (what installing rustup needs first), then a policy-rc.d that keeps apt-get
# from starting services inside the root (redis-server, mariadb, postgresql:
# the tests start their own, and a daemon left in the root would outlive the
# run) and /etc/hosts (debootstrap writes none; the tests reach their
# servers as localhost too). The root's apt sources: root_sources.
root_bootstrap() {
    local root="$1" distro="$2" suite="$3" mirror="$4" components="$5" variant="$6" script="${7:-}"
    local -a opts=(--include=ca-certificates --components="${components// /,}")
    [[ -z "$variant" ]] || opts+=(--variant="$variant")
    command -v debootstrap >/dev/null 2>&1 \
        || DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap </dev/null >/dev/null \
        || { echo "$(_roots_me): apt-get install debootstrap failed" >&2; return 1; }
    # Debian 12 ships no Ubuntu archive key (no ubuntu-keyring package
    # there), so the bootstrap of an Ubuntu root cannot verify the Release
    # file; the root's own ubuntu-keyring, which the bootstrap installs,
    # then verifies every later apt-get in the root.
    [[ "$distro" != ubuntu || -f /usr/share/keyrings/ubuntu-archive-keyring.gpg ]] || opts+=(--no-check-gpg)
    rm -rf "$root"
    mkdir -p "$root"
    # shellcheck disable=SC2086 # SCRIPT is one word or none
    debootstrap "${opts[@]}" "$suite" "$root" "$mirror" $script \
        || { echo "$(_roots_me): debootstrap $suite failed" >&2; return 1; }
    printf '#!/bin/sh\n# made by scripts/roots.sh: no service starts inside this root\nexit 101\n' \
        >"$root/usr/sbin/policy-rc.d"
    chmod 0755 "$root/usr/sbin/policy-rc.d"
    grep -qs '^127\.0\.0\.1[[:space:]].*localhost' "$root/etc/hosts" \
        || printf '127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n' >>"$root/etc/hosts"
}

# root_sources ROOT LINE…: the root's /etc/apt/sources.list (one-line format,
# as debootstrap and Debian's installer write it).
root_sources() {
    local root="$1"
    shift
    printf '%s\n' "$@" >"$root/etc/apt/sources.list"
}

root_bind() { # SRC DEST [mount options…]
    local src="$1" dest="$2"
    shift 2
    [[ -e "$dest" ]] || { if [[ -d "$src" || "$src" != /* ]]; then mkdir -p "$dest"; else mkdir -p "$(dirname "$dest")" && : >"$dest"; fi; }
    mount "$@" "$src" "$dest"
}

# root_mount ROOT: what a booted system has mounted and the tests use; needs
# root_private_mounts first (nothing is unmounted here).
root_mount() {
    local root="$1"
    [[ -n "${CRONLOCK_PRIVATE_MOUNTS:-}" ]] || { echo "root_mount: call root_private_mounts first" >&2; return 1; }
    # the root a mount point of its own, as / is on a machine: unshare(1)
    # (the tests' private mount namespaces, a nested scripts/compat) makes
    # / private, which the kernel refuses for a / that is no mount point
    mount --bind "$root" "$root"
    mount --make-private "$root"
    root_bind proc "$root/proc" -t proc
    root_bind sysfs "$root/sys" -t sysfs
    root_bind /dev "$root/dev" --bind
    root_bind shm "$root/dev/shm" -t tmpfs -o mode=1777
    root_bind devpts "$root/dev/pts" -t devpts -o newinstance,ptmxmode=0666
    root_bind run "$root/run" -t tmpfs -o mode=0755
    mkdir -p "$root/run/lock" && chmod 1777 "$root/run/lock"
    root_bind tmp "$root/tmp" -t tmpfs -o mode=1777
    # name resolution: the host's resolver (what a fresh machine gets from DHCP)
    cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
    root_network_trust "$root"
}

# root_network_trust ROOT: the certificate authorities this host adds to
# Debian's (/usr/local/share/ca-certificates: a network whose proxy signs
# TLS itself, as many company networks have), as a fresh machine on the same
# network is given them, or no crate, npm package or rustup download gets
# through. Nothing of the project's. If ca-certificates is not installed in
# the root yet, its installation picks them up.
root_network_trust() {
    local root="$1" crt
    local -a local_cas=()
    for crt in /usr/local/share/ca-certificates/*.crt; do
        [[ -f "$crt" ]] && local_cas+=("$crt")
    done
    ((${#local_cas[@]})) || return 0
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp "${local_cas[@]}" "$root/usr/local/share/ca-certificates/"
    if [[ -x "$root/usr/sbin/update-ca-certificates" ]]; then
        chroot "$root" /usr/sbin/update-ca-certificates >/dev/null 2>&1 || true
    fi
}

# root_rust ROOT fresh|shared: this host's Rust in the root (no registry has
# it). fresh: the toolchains of this host's rustup read-only at
# /opt/rust/rustup, its proxies (cargo, rustc, rustfmt, cargo-clippy …, all
# links to rustup) read-only on PATH at /opt/rust/bin, and an empty
# CARGO_HOME of the root's own (/root/.cargo: crates are fetched from the
# registry as on a new machine). shared: this host's CARGO_HOME (the crates
# already downloaded) and RUSTUP_HOME, writable.
root_rust() {
    local root="$1" mode="$2"
    local cargo_home="${CARGO_HOME:-$HOME/.cargo}" rustup_home="${RUSTUP_HOME:-$HOME/.rustup}"
    [[ -x "$cargo_home/bin/rustup" && -d "$rustup_home/toolchains" ]] \
        || { echo "$(_roots_me): no rustup here ($cargo_home/bin/rustup, $rustup_home): install Rust with rustup" >&2; return 1; }
    if [[ "$mode" == shared ]]; then
        root_bind "$cargo_home" "$root/opt/rust/cargo" --bind
        root_bind "$rustup_home" "$root/opt/rust/rustup" --bind
        ROOT_CARGO_HOME=/opt/rust/cargo
    else
        root_bind "$cargo_home/bin" "$root/opt/rust/bin" --bind -o ro
        root_bind "$rustup_home" "$root/opt/rust/rustup" --bind -o ro
        mkdir -p "$root/root/.cargo"
        ROOT_CARGO_HOME=/root/.cargo
    fi
}

# in_root ROOT CMD…: CMD in ROOT as root with the environment of a login
# shell there (nothing inherited from this process), Rust on PATH when
# root_rust made it available.
in_root() {
    local root="$1"
    shift
    local rust_path=/opt/rust/bin
    [[ ! -d "$root/opt/rust/cargo/bin" ]] || rust_path=/opt/rust/cargo/bin
    chroot "$root" /usr/bin/env -i HOME=/root USER=root LOGNAME=root SHELL=/bin/bash \
        LANG=C.UTF-8 TERM=dumb \
        PATH="$rust_path:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
        RUSTUP_HOME=/opt/rust/rustup CARGO_HOME="${ROOT_CARGO_HOME:-/root/.cargo}" "$@"
}

# copy_tree SRC DEST: what a release tarball of SRC holds: in a git checkout
# its tracked and untracked files, not the ignored ones (no target/, no
# caches); elsewhere (an unpacked tarball, a copy made by copy_tree, where
# there may be no git either) every file but target/. Replaces what DEST
# held, except DEST/target.
copy_tree() {
    local src="$1" dest="$2"
    mkdir -p "$dest"
    find "$dest" -mindepth 1 -maxdepth 1 ! -name target -exec rm -rf {} +
    if command -v git >/dev/null 2>&1 && git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        (cd "$src" && git ls-files -z -co --exclude-standard | tar --null -T - -cf -) | tar -C "$dest" -xf -
    else
        tar -C "$src" --exclude=./target -cf - . | tar -C "$dest" -xf -
    fi
}

# root_processes ROOT: the pids of the processes running inside ROOT (a
# daemon a run left behind), one per line.
root_processes() {
    local root link pid
    root="$(realpath "$1")"
    for link in /proc/[0-9]*/root; do
        pid="${link#/proc/}" pid="${pid%/root}"
        [[ "$(readlink "$link" 2>/dev/null)" == "$root" ]] && echo "$pid"
    done
    return 0
}

# root_unmount ROOT: unmounts everything mounted at or under ROOT in this
# mount namespace, deepest first; fails if something stays mounted.
root_unmount() {
    local root m
    root="$(realpath "$1")"
    # mountinfo's 5th field is the mount point (octal escapes for blanks)
    while read -r m; do
        umount -l "$m" 2>/dev/null || true
    done < <(awk -v r="$root" '$5 == r || index($5, r "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r)
    if awk -v r="$root" '$5 == r || index($5, r "/") == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo; then
        echo "$(_roots_me): still mounted under $root:" >&2
        awk -v r="$root" '$5 == r || index($5, r "/") == 1 { print "  " $5 }' /proc/self/mountinfo >&2
        return 1
    fi
}
