dnl cronlock is written in Rust: in `phpize && ./configure && make && make install`
dnl make runs cargo (see Makefile.frag) against the PHP whose php-config
dnl configure uses (--with-php-config, else php-config on PATH), and make
dnl install copies modules/cronlock.so into that PHP's extension directory.

PHP_ARG_ENABLE([cronlock],
  [whether to build cronlock],
  [AS_HELP_STRING([--enable-cronlock], [Build cronlock (Rust: needs cargo >= 1.89, clang for bindgen)])],
  [yes], [no])

PHP_ARG_WITH([cargo],
  [path of cargo],
  [AS_HELP_STRING([--with-cargo=PATH], [cargo to build with (default: cargo on PATH or ~/.cargo/bin)])],
  [no], [no])

if test "$PHP_CRONLOCK" != "no"; then
  if test "$PHP_CARGO" != "no" && test "$PHP_CARGO" != "yes"; then
    CRONLOCK_CARGO="$PHP_CARGO"
  else
    AC_PATH_PROG([CRONLOCK_CARGO], [cargo], [no], [$PATH:$HOME/.cargo/bin])
  fi
  if test "$CRONLOCK_CARGO" = "no" || ! test -x "$CRONLOCK_CARGO"; then
    AC_MSG_ERROR([cargo not found: install Rust 1.89 or later (https://rustup.rs) or pass --with-cargo=PATH])
  fi
  dnl a rustup proxy without a default toolchain is on PATH but runs nothing:
  dnl find out here, not half way through make
  AC_MSG_CHECKING([cargo version])
  CRONLOCK_CARGO_VERSION=`"$CRONLOCK_CARGO" --version 2>&1`
  CRONLOCK_CARGO_VERSION_NUM=`echo "$CRONLOCK_CARGO_VERSION" | sed -n 's/^cargo \([[0-9]][[0-9]]*\.[[0-9]][[0-9]]*\)\..*/\1/p'`
  if test -z "$CRONLOCK_CARGO_VERSION_NUM"; then
    AC_MSG_RESULT([none])
    AC_MSG_ERROR([$CRONLOCK_CARGO --version did not name a cargo version (a rustup proxy without a toolchain? run: rustup default stable); it said: $CRONLOCK_CARGO_VERSION])
  fi
  AC_MSG_RESULT([$CRONLOCK_CARGO_VERSION_NUM])
  CRONLOCK_CARGO_MAJOR=`echo "$CRONLOCK_CARGO_VERSION_NUM" | cut -d. -f1`
  CRONLOCK_CARGO_MINOR=`echo "$CRONLOCK_CARGO_VERSION_NUM" | cut -d. -f2`
  if test "$CRONLOCK_CARGO_MAJOR" -lt 1 || { test "$CRONLOCK_CARGO_MAJOR" -eq 1 && test "$CRONLOCK_CARGO_MINOR" -lt 89; }; then
    AC_MSG_ERROR([cargo $CRONLOCK_CARGO_VERSION_NUM is too old: cronlock needs Rust 1.89 or later (rustup update stable)])
  fi

  dnl the PHP to build for: the one this configure was set up with
  CRONLOCK_PHP_CONFIG="$PHP_CONFIG"
  case "$CRONLOCK_PHP_CONFIG" in
    /*) ;;
    *) CRONLOCK_PHP_CONFIG=`command -v "$CRONLOCK_PHP_CONFIG"` ;;
  esac
  CRONLOCK_PHP="$PHP_EXECUTABLE"
  CRONLOCK_PHP_VERSION=`"$CRONLOCK_PHP_CONFIG" --version 2>/dev/null`
  AC_MSG_CHECKING([the PHP cronlock is built for])
  AC_MSG_RESULT([PHP $CRONLOCK_PHP_VERSION ($CRONLOCK_PHP_CONFIG, $CRONLOCK_PHP)])

  dnl what the module is made from: make reruns cargo only when one of these
  dnl is newer than modules/cronlock.so, so that make install (maybe as root
  dnl without a Rust toolchain) only copies. A new source file is named by an
  dnl existing one (mod), which is then newer too. The Lua scripts are the
  dnl polyfill's files (src/lock/redis/scripts.rs embeds them).
  CRONLOCK_SOURCES=`cd "$abs_srcdir" && find Cargo.toml Cargo.lock build.rs src polyfill/resources -type f | sed "s|^|$abs_srcdir/|" | tr '\n' ' '`

  case $host_os in
    darwin*) CRONLOCK_CARGO_LIB=libcronlock.dylib ;;
    *) CRONLOCK_CARGO_LIB=libcronlock.so ;;
  esac

  PHP_ADD_BUILD_DIR([modules])
  PHP_MODULES="\$(phplibdir)/cronlock.so"
  PHP_SUBST(CRONLOCK_SOURCES)
  PHP_SUBST(CRONLOCK_CARGO)
  PHP_SUBST(CRONLOCK_PHP_CONFIG)
  PHP_SUBST(CRONLOCK_PHP)
  PHP_SUBST(CRONLOCK_CARGO_LIB)
  PHP_ADD_MAKEFILE_FRAGMENT([$abs_srcdir/Makefile.frag], [$abs_srcdir], [$abs_builddir])
fi
