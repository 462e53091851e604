# cronlock: modules/cronlock.so is cargo's release build, made against the PHP
# configure found (PHP_CONFIG and PHP tell build.rs and ext-php-rs which).
# cargo runs only when a source is newer than the module (CRONLOCK_SOURCES,
# listed by configure), so make install of a built tree only copies.
# CARGO_TARGET_DIR from the environment is honoured (default: target/ in the
# source tree).

CRONLOCK_TARGET_DIR = $${CARGO_TARGET_DIR:-$(top_srcdir)/target}

$(phplibdir)/cronlock.so: $(CRONLOCK_SOURCES)
	@mkdir -p $(phplibdir)
	cd $(top_srcdir) && PHP_CONFIG="$(CRONLOCK_PHP_CONFIG)" PHP="$(CRONLOCK_PHP)" \
		"$(CRONLOCK_CARGO)" build --release --locked
	cp "$(CRONLOCK_TARGET_DIR)/release/$(CRONLOCK_CARGO_LIB)" $(phplibdir)/cronlock.so

# PHP's make test finds the modules to load by sourcing libtool .la files;
# there is none (cargo links the module), so name it here (make test passes
# -d extension_dir=modules/). The tests are tests/phpt/*.phpt.
PHP_TEST_SHARED_EXTENSIONS = -d extension=cronlock.so

# PHP's clean deletes every .o, .a and .so under the build directory, cargo's
# target/ included, whose build-script outputs cargo then still believes
# fresh (the next link fails). With the default, in-tree target/ the whole
# directory goes, so make rebuilds it; a CARGO_TARGET_DIR of your own is left
# alone (make then only copies the module again).
clean: cronlock-clean
cronlock-clean:
	@if test -z "$$CARGO_TARGET_DIR"; then \
		echo "rm -rf $(top_srcdir)/target"; rm -rf "$(top_srcdir)/target"; \
	fi

.PHONY: cronlock-clean

# cronlock, the operator command (cli/, PHP): make install copies it to
# $(CRONLOCK_CLI_DIR) and writes $(CRONLOCK_BINDIR)/cronlock, a two-line
# shell script that runs it with the PHP this extension was built for (so
# `cronlock run` has the extension, whichever php is first on PATH).
CRONLOCK_CLI_DIR = $(prefix)/share/cronlock/cli
CRONLOCK_BINDIR = $(exec_prefix)/bin

install: install-cronlock-cli
install-cronlock-cli:
	@echo "Installing the cronlock command:  $(INSTALL_ROOT)$(CRONLOCK_BINDIR)/cronlock"
	@rm -rf "$(INSTALL_ROOT)$(CRONLOCK_CLI_DIR)"
	@$(mkinstalldirs) "$(INSTALL_ROOT)$(CRONLOCK_CLI_DIR)" "$(INSTALL_ROOT)$(CRONLOCK_BINDIR)"
	@cp -R "$(top_srcdir)/cli/." "$(INSTALL_ROOT)$(CRONLOCK_CLI_DIR)"
	@chmod -R u=rwX,go=rX "$(INSTALL_ROOT)$(CRONLOCK_CLI_DIR)"
	@chmod 755 "$(INSTALL_ROOT)$(CRONLOCK_CLI_DIR)/bin/cronlock"
	@printf '#!/bin/sh\nexec %s %s "$$@"\n' "'$(CRONLOCK_PHP)'" "'$(CRONLOCK_CLI_DIR)/bin/cronlock'" > "$(INSTALL_ROOT)$(CRONLOCK_BINDIR)/cronlock"
	@chmod 755 "$(INSTALL_ROOT)$(CRONLOCK_BINDIR)/cronlock"

.PHONY: install-cronlock-cli
