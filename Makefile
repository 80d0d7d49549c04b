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

# Performance (issue 6, BENCHMARKS.md): ovstream broker as its own process, 5M predictions of the
# Auckland 48 h archive plus positions, then T_read, T_ovstream (run --drain) and T_write in one run;
# ends with ratio=R. BENCHFLAGS e.g. "--predictions 500000" or "--scale 1,4,16".
.PHONY: bench
bench:
	@bash .ci/postgres.sh
	$(GO) run ./integration/bench $(BENCHFLAGS)
