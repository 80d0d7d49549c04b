# ovstream: see README.md.
GO      ?= go
BIN     := bin/ovstream
PKGS    := ./aggregate/... ./consumer/... ./store/... ./migrations/... ./cmd/...

.PHONY: build run test unit integration fuzz vet clean

build:
	$(GO) build -o $(BIN) ./cmd/ovstream

# The demo: embedded broker, bundled real sample, run --drain, summary.
run: build
	@bash .ci/postgres.sh
	./$(BIN) demo

# Unit tests, integration tests (real PostgreSQL, embedded broker over TCP), short fuzzing.
test: vet
	@bash .ci/postgres.sh
	$(GO) test -count=1 $(PKGS)
	$(GO) test -count=1 -tags integration -timeout 15m ./integration/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 5s ./aggregate/

vet:
	$(GO) vet ./...
	$(GO) vet -tags integration,crashpoints ./...

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 2m ./aggregate/

clean:
	rm -rf bin
