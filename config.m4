dnl cronlock is written in Rust: `phpize && ./configure && make && make install`
dnl runs cargo (see Makefile.frag) against the PHP whose php-config configure
dnl uses (--with-php-config, else php-config on PATH), and installs
dnl modules/cronlock.so into that PHP's extension directory.

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
  AC_MSG_CHECKING([cargo version])
  CRONLOCK_CARGO_VERSION=`"$CRONLOCK_CARGO" --version 2>/dev/null`
  AC_MSG_RESULT([$CRONLOCK_CARGO_VERSION])

  dnl the PHP to build for: the one this configure was set up with
  CRONLOCK_PHP_CONFIG="$PHP_CONFIG"
  case "$CRONLOCK_PHP_CONFIG" in
    /*) ;;
    *) CRONLOCK_PHP_CONFIG=`command -v "$CRONLOCK_PHP_CONFIG"` ;;
  esac
  CRONLOCK_PHP="$PHP_EXECUTABLE"
  AC_MSG_CHECKING([the PHP cronlock is built for])
  AC_MSG_RESULT([$CRONLOCK_PHP_CONFIG (`$CRONLOCK_PHP_CONFIG --version`), $CRONLOCK_PHP])

  case $host_os in
    darwin*) CRONLOCK_CARGO_LIB=libcronlock.dylib ;;
    *) CRONLOCK_CARGO_LIB=libcronlock.so ;;
  esac

  PHP_ADD_BUILD_DIR([modules])
  PHP_MODULES="\$(phplibdir)/cronlock.so"
  PHP_SUBST(CRONLOCK_CARGO)
  PHP_SUBST(CRONLOCK_PHP_CONFIG)
  PHP_SUBST(CRONLOCK_PHP)
  PHP_SUBST(CRONLOCK_CARGO_LIB)
  PHP_ADD_MAKEFILE_FRAGMENT([$abs_srcdir/Makefile.frag], [$abs_srcdir], [$abs_builddir])
fi
