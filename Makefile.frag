# cronlock: modules/cronlock.so is cargo's release build, made against the PHP
# configure found (PHP_CONFIG and PHP tell build.rs and ext-php-rs which).
# cargo decides what is stale, so this rule always asks it. CARGO_TARGET_DIR
# from the environment is honoured (default: target/ in the source tree).

CRONLOCK_TARGET_DIR = $${CARGO_TARGET_DIR:-$(top_srcdir)/target}

$(phplibdir)/cronlock.so: cronlock-cargo-build
	@:

cronlock-cargo-build:
	@mkdir -p $(phplibdir)
	cd $(top_srcdir) && PHP_CONFIG="$(CRONLOCK_PHP_CONFIG)" PHP="$(CRONLOCK_PHP)" \
		"$(CRONLOCK_CARGO)" build --release --locked
	cp "$(CRONLOCK_TARGET_DIR)/release/$(CRONLOCK_CARGO_LIB)" $(phplibdir)/cronlock.so

.PHONY: cronlock-cargo-build
