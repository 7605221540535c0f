# Wharf's developer commands. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO        ?= go
SQLC      := $(GO) tool -modfile=tools/go.mod sqlc
# A reachable Postgres: $DATABASE_URL when it answers, else a local server
# that scripts/ensure-postgres.sh finds or starts (it says what it did).
ENSURE_DB := scripts/ensure-postgres.sh
TESTFLAGS ?= -race -count=1 -timeout 20m
FUZZTIME  ?= 30s

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: generate
generate: ## Regenerate internal/dbsqlc from queries/ and schema/ with sqlc
	$(SQLC) generate

.PHONY: verify
verify: ## Fail when generated code does not match queries/ and schema/
	$(SQLC) diff
	$(SQLC) compile

.PHONY: lint
lint: ## gofmt and go vet (the library and its jsonschema, interop and browser-test modules)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd jsonschema && $(GO) vet ./...
	cd interop && $(GO) vet ./...
	cd e2e && $(GO) vet ./...

.PHONY: db
db: ## Print a DATABASE_URL, starting a local Postgres when none answers
	@$(ENSURE_DB)

.PHONY: test
test: ## Run all tests with -race against a real Postgres (started when needed), the jsonschema, interop and browser (chromium) modules' too
	@url=$$($(ENSURE_DB)) && export DATABASE_URL="$$url" && status=0 && \
	  { $(GO) test $(TESTFLAGS) ./... || status=1; } && \
	  { (cd jsonschema && $(GO) test $(TESTFLAGS) ./...) || status=1; } && \
	  { (cd interop && $(GO) test $(TESTFLAGS) ./...) || status=1; } && \
	  { (cd e2e && $(GO) test $(TESTFLAGS) ./...) || status=1; } && exit $$status

.PHONY: screenshot
screenshot: ## Refresh docs/dashboard.png and docs/portal.png: the browser tests' pictures of the dashboard and the portal
	@url=$$($(ENSURE_DB)) && export DATABASE_URL="$$url" && \
	  cd e2e && WHARF_SCREENSHOT=$(CURDIR)/docs/dashboard.png WHARF_PORTAL_SCREENSHOT=$(CURDIR)/docs/portal.png \
	  $(GO) test -count=1 -run 'TestDashboardInABrowser|TestPortalInABrowser' ./...

.PHONY: chaos
chaos: ## Long chaos run (bigger storm, kills, cuts, a Postgres restart); WHARF_CHAOS_SOAK=10m adds a soak
	@url=$$($(ENSURE_DB)) && export DATABASE_URL="$$url" && log=$$(mktemp) && \
	  WHARF_CHAOS=long $(GO) test -race -count=1 -timeout 2h -v -run '^TestChaos' ./internal/chaos/ 2>&1 | tee "$$log"; \
	  status=$${PIPESTATUS[0]}; echo; echo "== summary"; grep -h '^CHAOS ' "$$log"; rm -f "$$log"; exit $$status

.PHONY: bench
bench: ## Run the benchmarks; ends with one "BENCH <name> <ratio> <wharf> <baseline>" line per figure
	@url=$$($(ENSURE_DB)) && export DATABASE_URL="$$url" && log=$$(mktemp) && \
	  { $(GO) test -run '^$$' -bench . -benchtime 1s ./signature/ ./idempotency/ && \
	    $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./inbox/ ./outbox/ ./jobs/ ./example/ ./internal/chaos/ ./dashboard/; } 2>&1 | tee "$$log"; \
	  status=$${PIPESTATUS[0]}; echo; echo "== summary (ratio = wharf / baseline, same run)"; \
	  grep -h '^BENCH ' "$$log"; rm -f "$$log"; exit $$status

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

.PHONY: demo
demo: ## Run the example app end to end and print a report
	@url=$$(WHARF_DB_NAME=wharf_demo $(ENSURE_DB)) && DATABASE_URL="$$url" $(GO) run ./example/demo

.PHONY: example
example: ## Run the example app in the foreground (Ctrl-C stops it cleanly, exit status 0)
	@url=$$(WHARF_DB_NAME=wharf_demo $(ENSURE_DB)) && bin=$${TMPDIR:-/tmp}/wharf-example-$$(id -u) && \
	  $(GO) build -o "$$bin.$$$$" ./example && mv -f "$$bin.$$$$" "$$bin" && export DATABASE_URL="$$url" && \
	  if [ -t 0 ]; then set -m; "$$bin" & fg %1 >/dev/null; else exec "$$bin"; fi
# On a terminal the app runs as the terminal's foreground job, so Ctrl-C
# reaches it alone: it shuts down and make exits with its status (0), where
# make itself, interrupted, would exit 130 whatever the app did.

.PHONY: tidy
tidy: ## go mod tidy for the library, the tools, the jsonschema, interop and browser-test modules
	$(GO) mod tidy
	cd tools && $(GO) mod tidy
	cd jsonschema && $(GO) mod tidy
	cd interop && $(GO) mod tidy
	cd e2e && $(GO) mod tidy
