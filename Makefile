SHELL := /bin/bash
# cryo: checkpoint and restore GPU containers.
# `make demo` and `make test` install what is missing (contrib/install-deps.sh) first.

GO       ?= go
BIN      := $(CURDIR)/bin
FAKE     := $(BIN)/fake
DIST     := $(CURDIR)/dist
CRYO_DEPS ?= /opt/cryo-deps
export CRYO_DEPS
# The names one multi-call binary answers to.
LINKS    := containerd-shim-cryo-v2 cryo-runc cryo-criu-action
# The names cryo-k8s (cmd/cryo-k8s: the Kubernetes front ends, apart so
# that cryo links no Kubernetes client) answers to.
K8S_LINKS := kubectl-cryo
# The version cryo reports (cryo version, the shim's -v, every manifest).
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse --short HEAD 2>/dev/null)
GOFLAGS_BUILD := -trimpath -ldflags "-s -w -X github.com/cryo-gpu/cryo/internal/version.Version=$(VERSION) -X github.com/cryo-gpu/cryo/internal/version.Commit=$(COMMIT)"

INSTALLER_IMAGE ?= localhost/cryo/installer:$(VERSION)

.PHONY: all build failpoints fake deps deps-demo installer-image test test-unit test-integration demo dist release gpu-test bench docs generate clean help

all: build

help:
	@echo "make demo        install what is missing (no Kubernetes), then checkpoint and restore a container through"
	@echo "                 containerd (without a GPU: the fake CUDA app on cryo's fake driver)"
	@echo "make test        install what is missing, then run all tests (unit and integration, as root)"
	@echo "make build       build bin/cryo and its names ($(LINKS)), bin/cryo-k8s and its ($(K8S_LINKS))"
	@echo "make failpoints  build bin/failpoints/cryo, a cryo with the integration tests' failpoints (never shipped)"
	@echo "make fake        build the fake CUDA driver used by the tests (bin/fake)"
	@echo "make deps        install CRIU 4.2.1, runc, containerd 1.7 and 2.x, Podman, a registry, Kubernetes (CRYO_DEPS_K8S=0: not)"
	@echo "make installer-image  the node installer's OCI image for the Helm chart: bin/cryo-installer.tar (ctr -n k8s.io images import)"
	@echo "make dist        self-contained bundle for a GPU host: dist/cryo-bundle.tar.xz (with man pages and shell completion)"
	@echo "make release     versioned release in dist/release: cryo-VERSION-linux-amd64.tar.gz, cryo_VERSION_amd64.deb,"
	@echo "                 SHA256SUMS (VERSION=v0.x.y, default git describe --tags; docs/release.md)"
	@echo "make gpu-test    run the GPU acceptance tests (on a GPU host, from the bundle)"
	@echo "make bench       run the GPU benchmarks (integration/gpu/bench.sh, on a GPU host)"
	@echo "make docs        regenerate docs/cli.md (the command tree) and docs/architecture.md (the packages)"
	@echo "make generate    regenerate the Kubernetes API's deep copies and its CRD (deploy/helm/cryo/crds)"
	@echo "make clean       remove bin/ and dist/"

build:
	@mkdir -p $(BIN)
	CGO_ENABLED=1 $(GO) build $(GOFLAGS_BUILD) -o $(BIN)/cryo ./cmd/cryo
	@for l in $(LINKS); do ln -sf cryo $(BIN)/$$l; done
	CGO_ENABLED=1 $(GO) build $(GOFLAGS_BUILD) -o $(BIN)/cryo-k8s ./cmd/cryo-k8s
	@for l in $(K8S_LINKS); do ln -sf cryo-k8s $(BIN)/$$l; done

# A cryo with the failpoints (-tags cryo_failpoints: CRYO_TEST_HOLD holds a
# checkpoint before a step) for the integration tests, which build it
# themselves through this target (integration/harness/failpoint.go). Built
# apart, under a temporary name, so that bin/cryo never holds them and two
# test runs never see half a binary. cryo-k8s too: the agent's tests hold
# it at a step (TestK8sAgent); CRYO_FAILPOINTS_K8S=0 skips it where no test
# needs it (the GPU bundle).
failpoints:
	@mkdir -p $(BIN)/failpoints
	tmp=$(BIN)/failpoints/.cryo.$$$$; CGO_ENABLED=1 $(GO) build -tags cryo_failpoints $(GOFLAGS_BUILD) -o $$tmp ./cmd/cryo && mv -f $$tmp $(BIN)/failpoints/cryo
	@for l in $(LINKS); do ln -sfn cryo $(BIN)/failpoints/$$l; done
	@if [ "$${CRYO_FAILPOINTS_K8S:-1}" != 0 ]; then \
		tmp=$(BIN)/failpoints/.cryo-k8s.$$$$; CGO_ENABLED=1 $(GO) build -tags cryo_failpoints $(GOFLAGS_BUILD) -o $$tmp ./cmd/cryo-k8s && mv -f $$tmp $(BIN)/failpoints/cryo-k8s; fi

fake:
	@mkdir -p $(FAKE)
	gcc -O2 -shared -fPIC -o $(FAKE)/libcuda.so.1 internal/cuda/fakecuda/csrc/fakecuda.c
	gcc -O2 -shared -fPIC -o $(FAKE)/libnvidia-ml.so.1 internal/cuda/fakecuda/csrc/fakenvml.c
	gcc -O2 -o $(FAKE)/fakecuda-app internal/cuda/fakecuda/csrc/fakeapp.c -ldl
	gcc -O2 -static -o $(FAKE)/netserver integration/testdata/netserver.c

deps:
	@bash contrib/install-deps.sh

# The node installer's image (deploy/helm/cryo runs it in a DaemonSet),
# built without a container engine: an OCI layout in a tar, for
# `ctr -n k8s.io images import` or any registry client to push.
installer-image: build
	$(GO) run ./internal/installer/image -bin $(BIN)/cryo -k8s $(BIN)/cryo-k8s -name $(INSTALLER_IMAGE) -o $(BIN)/cryo-installer.tar

# The tests must leave no process behind: `go test` runs with a random
# CRYO_TEST_RUN, which every process it starts inherits, and
# contrib/leftovers.sh fails the run on any process born since that carries
# it (or has an ancestor that does). Other shells' processes do not count.
# The integration packages (integration/<front end>) share root, cgroups
# and containerd's paths, so they run one at a time (-p 1), while the unit
# tests run beside them, as they did beside the one integration package.
test: deps build failpoints fake
	$(GO) vet ./...
	$(GO) test -run '^$$' -fuzz '^FuzzCheck$$' -fuzztime 60s ./internal/confine
	@bash contrib/leftovers.sh before $(BIN)/procs.before
	cd contrib/release/deb && $(GO) test -count=1 ./...
	run=$$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n'); \
		CRYO_TEST_RUN=$$run $(GO) test -count=1 -timeout 40m $$($(GO) list ./... | grep -v /integration) >$(BIN)/test-unit.log 2>&1 & unit=$$!; \
		CRYO_TEST_RUN=$$run $(GO) test -count=1 -p 1 -timeout 40m ./integration/... 2>&1 | tee $(BIN)/test.log; rc=$${PIPESTATUS[0]}; \
		wait $$unit || rc=1; cat $(BIN)/test-unit.log >>$(BIN)/test.log; cat $(BIN)/test-unit.log; \
		bash contrib/leftovers.sh after $(BIN)/procs.before $$run || rc=1; exit $$rc

test-unit: build fake
	$(GO) test -count=1 $$($(GO) list ./... | grep -v /integration)
	cd contrib/release/deb && $(GO) test -count=1 ./...

test-integration: deps build failpoints fake
	$(GO) test -count=1 -v -p 1 -timeout 40m ./integration/...

# The demo needs no Kubernetes: CRYO_DEPS_K8S=0 skips the kubelet build.
# Without a GPU it runs the fake CUDA app (bin/fake) and says so.
demo: deps-demo build fake
	@bash contrib/demo.sh

deps-demo:
	@CRYO_DEPS_K8S=0 bash contrib/install-deps.sh

dist: build fake
	@bash contrib/make-dist.sh $(DIST)

# The release tarball and .deb (docs/release.md). VERSION on the command
# line (make release VERSION=v0.3.0) reaches `make build` too, so that
# `cryo version` prints it.
release: build
	@bash contrib/release/release.sh $(DIST)/release $(VERSION)

gpu-test:
	@bash integration/gpu/run.sh

bench:
	@bash integration/gpu/bench.sh

# docs/cli.md is generated from the command tree, docs/architecture.md from
# `go list` and the packages' doc comments (internal/archdoc); a unit test
# fails when either is stale.
docs: build
	$(BIN)/cryo gen-docs --markdown docs/cli.md
	$(GO) run ./internal/archdoc -o docs/architecture.md

# The Kubernetes API (api/v1alpha1): deep copies and the CRD in the chart's
# crds/, by controller-gen, built from the tools module (tools/go.mod) so
# that its dependencies stay out of cryo's; api/v1alpha1's test fails when
# either is stale.
generate:
	cd tools && $(GO) build -o $(BIN)/controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen
	$(BIN)/controller-gen object paths=./api/...
	$(BIN)/controller-gen crd paths=./api/... output:crd:artifacts:config=deploy/helm/cryo/crds

clean:
	rm -rf $(BIN) $(DIST)
