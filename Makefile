# reflector: see README.md. `make test` is what CI runs.

SHELL := /usr/bin/env bash
GO ?= go
CONTROLLER_GEN_VERSION ?= v0.23.0
CONTROLLER_GEN ?= $(REFLECTOR_CACHE)/bin/controller-gen-$(CONTROLLER_GEN_VERSION)
FUZZTIME ?= 30000x
FUZZMINIMIZE ?= 200x
BENCHCOUNT ?= 6
BENCH ?= .
BENCHOUT ?= bench.out
TESTFLAGS ?=

.PHONY: all generate check-generated build test unit images-test release-test faults-test fuzz bench lint actionlint deps testenv knative-env flux-cli flux-crds controller-gen cosign-cli cluster-env cluster-test run check clean

all: build

## generate: deepcopy functions and CRD manifests from internal/api/v1 (controller-gen, built
## into the cache by `make controller-gen`).
generate: controller-gen
	$(CONTROLLER_GEN) object paths=./internal/api/... \
		crd:crdVersions=v1 output:crd:artifacts:config=config/crd/bases

## check-generated: fail when the generated files differ from what `make generate` writes.
check-generated: generate
	@git diff --exit-code --stat -- internal/api config/crd || \
		{ echo "generated files are stale: run 'make generate' and commit the result"; exit 1; }
	@test -z "$$(git ls-files --others --exclude-standard -- internal/api config/crd)" || \
		{ echo "make generate wrote files that are not committed"; exit 1; }

## build: compile every package and binary.
build:
	$(GO) build ./...

## lint: gofmt, go vet, and actionlint on the workflows under .github/workflows (installs
## actionlint into bin/ on first use; it runs shellcheck on their scripts where shellcheck is
## installed).
ACTIONLINT_VERSION ?= v1.7.12
ACTIONLINT ?= $(CURDIR)/bin/actionlint
lint: $(ACTIONLINT)
	@out=$$(gofmt -l $$(git ls-files '*.go')); test -z "$$out" || { echo "gofmt would change:"; echo "$$out"; exit 1; }
	$(GO) vet ./...
	$(ACTIONLINT)

## actionlint: install actionlint (the GitHub Actions workflow checker) into bin/.
actionlint: $(ACTIONLINT)
$(ACTIONLINT):
	GOBIN=$(dir $(ACTIONLINT)) $(GO) install github.com/rhysd/actionlint/cmd/actionlint@$(ACTIONLINT_VERSION)

## deps: install the Debian packages the tests, `make lint` and `make run` use (docker-registry,
## shellcheck).
deps:
	./hack/deps.sh

## testenv: build etcd and kube-apiserver into the cache once (about 15 minutes the first time).
testenv:
	./hack/testenv.sh

## knative-env: build Knative Serving's and Eventing's controllers and webhooks and the
## ApiServerSource receive adapter into the cache once (hack/knative.sh), with their probe port
## movable so that they can share one host.
knative-env:
	./hack/knative.sh

## flux-cli: build the flux CLI into the cache once (hack/flux.sh).
flux-cli:
	./hack/flux.sh

## controller-gen: build controller-gen (CONTROLLER_GEN_VERSION) into the cache once
## (hack/controller-gen.sh).
controller-gen:
	CONTROLLER_GEN_VERSION=$(CONTROLLER_GEN_VERSION) ./hack/controller-gen.sh

## flux-crds: generate Flux's image.toolkit.fluxcd.io CRDs into the cache once
## (hack/flux-crds.sh): controller-gen over Flux's API types at the version that the flux CLI
## of `make flux-cli` depends on. The node test and the tests of `reflector check` and the
## policy schema apply them where a cluster serves Flux's CRDs. Never committed.
flux-crds: controller-gen
	CONTROLLER_GEN_VERSION=$(CONTROLLER_GEN_VERSION) ./hack/flux-crds.sh

## cosign-cli: build the cosign CLI into the cache once (hack/cosign.sh), for the tests that
## sign images with it.
cosign-cli:
	./hack/cosign.sh

## cluster-env: build what a single-node cluster needs beyond testenv into the cache once
## (hack/cluster.sh): kubelet, kube-proxy, kube-scheduler, kube-controller-manager, kubectl and
## a version-stamped kube-apiserver, CoreDNS, Traefik, pause, Knative Serving's and Eventing's
## images (ko), and install containerd, runc, the CNI plugins and iptables.
cluster-env:
	./hack/cluster.sh

## cluster-test: start a single-node cluster (internal/node) inside a network namespace that the
## test makes and removes, as root, and run pods on it; install reflector there from what
## `make release` builds (cosign signs it). Not part of `make test`.
cluster-test: deps testenv flux-cli flux-crds cosign-cli cluster-env
	REFLECTOR_CLUSTER_TEST=1 $(GO) test -count=1 -timeout 60m -v ./internal/node/

## test: everything CI checks: generated files, lint, unit and integration tests, the image
## build, a release to a local registry, short fuzzing.
test: deps check-generated lint testenv knative-env flux-cli flux-crds cosign-cli
	$(GO) test -count=1 -timeout 30m $(TESTFLAGS) ./...
	$(MAKE) images-test
	$(MAKE) release-test
	$(MAKE) fuzz

## unit: the tests that start no apiserver, no registry program and no image build, and contact
## nothing beyond 127.0.0.1 (-short skips the integration tests, each saying so): their servers,
## the in-process registry among them, run inside the test binary, and a few tests run helper
## processes of that binary, or sh and sleep.
unit:
	$(GO) test -count=1 -short ./...

## images-test: build the three images with ko and check each (installs ko on first use).
images-test:
	REFLECTOR_IMAGES_TEST=1 $(GO) test -count=1 -timeout 40m -run '^TestImagesIntegration$$' ./internal/deploy/

## release-test: run `make release` against a registry on 127.0.0.1 with a key pair of the test
## and check what it published (TestReleaseIntegration): each image an index of both platforms,
## an SBOM per image, signatures that the cosign CLI verifies, install.yaml by digest, crds.yaml's
## annotations, checksums.txt and the manifests artifact.
release-test: ko cosign-cli flux-cli
	REFLECTOR_RELEASE_TEST=1 $(GO) test -count=1 -timeout 40m -run '^TestReleaseIntegration$$' ./internal/deploy/

## faults-test: the tests of the tag store on a full volume, which mount a small tmpfs (root):
## the store's own and the whole system's under its running processes.
faults-test: testenv knative-env
	REFLECTOR_FAULTS_TEST=1 $(GO) test -count=1 -run 'FullVolume' ./internal/store/
	REFLECTOR_FAULTS_TEST=1 $(GO) test -count=1 -timeout 20m -run '^TestFullStoreIntegration$$' ./internal/stack/

## fuzz: run every fuzz target for FUZZTIME each. Go keeps the corpus it finds in its cache
## ($(go env GOCACHE)/fuzz); testdata/fuzz holds only seeds and inputs that once failed, which
## every go test replays: copy a failing input there when you fix what it found.
## The default is a number of inputs, not a duration: a duration's deadline can fall while the
## fuzzer minimizes a new input, which fails the run with "context deadline exceeded". The
## minimization of each new input is bounded the same way (FUZZMINIMIZE): Go's default, a minute
## an input, outlasts the test's ten-minute timeout over dozens of new inputs, and so can 1000
## runs of a target that opens a store each time (FuzzDeltas: up to 40 s an input).
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) $$pkg; \
		done; \
	done

## bench: run the benchmarks BENCHCOUNT times into BENCHOUT; compare two runs with benchstat.
bench: testenv knative-env
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count $(BENCHCOUNT) -timeout 60m ./... | tee $(BENCHOUT)
	$(GO) run golang.org/x/perf/cmd/benchstat@latest $(BENCHOUT)

## run: start reflector locally on 127.0.0.1 (state in .reflector/).
run: deps testenv knative-env
	$(GO) run ./hack/run

## check: check that the cluster of $$KUBECONFIG can run reflector (cmd/reflector, `reflector check`);
## CHECKFLAGS=--pre before the install.
check:
	$(GO) run ./cmd/reflector check $(CHECKFLAGS)

clean:
	rm -rf .reflector bin

## images: build and push the scan, policy and cron images with ko to KO_DOCKER_REPO, and point
## knative/ at them (IMAGES_OUT), so that `kubectl apply -k knative/` deploys what was built.
## KO_DEFAULTBASEIMAGE overrides .ko.yaml's base image where that one cannot be pulled.
KO_VERSION ?= v0.19.1
KO ?= $(CURDIR)/bin/ko
KO_DOCKER_REPO ?=
IMAGES_OUT ?= knative/images.yaml
IMAGE_CMDS := scan policy cron

.PHONY: images ko release
images: $(KO)
	@test -n "$(KO_DOCKER_REPO)" || { echo "set KO_DOCKER_REPO to the registry the cluster pulls from, e.g. KO_DOCKER_REPO=ghcr.io/you/reflector"; exit 1; }
	@set -eo pipefail; refs=$$(KO_DOCKER_REPO=$(KO_DOCKER_REPO) $(KO) build --base-import-paths $(KOFLAGS) $(addprefix ./cmd/,$(IMAGE_CMDS))); \
	{ echo "# Written by make images from ko's output: the ko:// references in the manifests map to these images."; \
	  sep=""; for ref in $$refs; do img=$${ref%@*}; case "$${img##*/}" in *:*) img=$${img%:*};; esac; cmd=$${img##*/}; \
	    printf '%sapiVersion: builtin\nkind: ImageTagTransformer\nmetadata:\n  name: reflector-%s\nimageTag:\n  name: ko://github.com/imagereflector/reflector/cmd/%s\n  newName: %s\n  digest: %s\n' \
	      "$$sep" "$$cmd" "$$cmd" "$$img" "$${ref#*@}"; sep="---"$$'\n'; done; } > $(IMAGES_OUT); \
	echo "$$refs"; echo "wrote $(IMAGES_OUT)"

## ko: install ko (the Go image builder) into bin/.
ko: $(KO)
$(KO):
	GOBIN=$(dir $(KO)) $(GO) install github.com/google/ko@$(KO_VERSION)

# The programs `make release` runs besides ko: the cosign and flux CLIs that `make cosign-cli` and
# `make flux-cli` build into the cache, or any others named here.
REFLECTOR_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/reflector
COSIGN ?= $(REFLECTOR_CACHE)/bin/cosign
FLUX ?= $(REFLECTOR_CACHE)/bin/flux

## release: build what the release VERSION (vX.Y.Z) publishes (docs/releasing.md): the scan,
## policy and cron images for RELEASE_PLATFORMS with ko, each with an SPDX SBOM, pushed to
## RELEASE_REPO/<cmd>:VERSION and signed with cosign (the key file COSIGN_KEY, its password in
## COSIGN_PASSWORD; keyless without one); the reflector CLI for RELEASE_CLI_PLATFORMS; and
## DIST/crds.yaml, DIST/install.yaml (every image by digest) and DIST/checksums.txt. With
## RELEASE_PUSH_MANIFESTS=1 it also pushes install.yaml as the OCI artifact
## RELEASE_MANIFESTS_REPO:VERSION, which a Flux OCIRepository can follow, and signs it.
## checksums.txt is signed too, into DIST/checksums.txt.sigstore.json (a Sigstore bundle).
## KO_DEFAULTBASEIMAGE overrides the base as for `make images`; COSIGNFLAGS, COSIGNBLOBFLAGS and
## FLUXFLAGS are added to each cosign sign, cosign sign-blob and flux push (such as
## --allow-http-registry, --tlog-upload=false, --insecure-registry).
VERSION ?=
RELEASE_REPO ?= ghcr.io/imagereflector/reflector
RELEASE_MANIFESTS_REPO ?= $(RELEASE_REPO)/manifests
RELEASE_PLATFORMS ?= linux/amd64,linux/arm64
RELEASE_CLI_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
RELEASE_PUSH_MANIFESTS ?=
RELEASE_SOURCE ?= https://github.com/imagereflector/reflector
DIST ?= dist
COSIGN_KEY ?=
COSIGNFLAGS ?=
COSIGNBLOBFLAGS ?=
FLUXFLAGS ?=

release: $(KO)
	@set -euo pipefail; \
	[[ "$(VERSION)" =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$$ ]] || \
		{ echo "set VERSION to the release's version, vMAJOR.MINOR.PATCH[-PRERELEASE], e.g. VERSION=v0.1.0"; exit 1; }; \
	command -v "$(COSIGN)" >/dev/null || { echo "no cosign at $(COSIGN): run make cosign-cli, or set COSIGN"; exit 1; }; \
	if [ -n "$(RELEASE_PUSH_MANIFESTS)" ]; then command -v "$(FLUX)" >/dev/null || { echo "no flux at $(FLUX): run make flux-cli, or set FLUX"; exit 1; }; fi; \
	work=$$(mktemp -d); trap 'rm -rf "$$work"' EXIT; \
	test -n "$(DIST)"; rm -rf "$(DIST)"; mkdir -p "$(DIST)"; \
	echo "release $(VERSION): building the images for $(RELEASE_PLATFORMS)"; \
	$(MAKE) --no-print-directory images KO_DOCKER_REPO=$(RELEASE_REPO) IMAGES_OUT="$$work/images.yaml" \
		KOFLAGS="--platform=$(RELEASE_PLATFORMS) --sbom=spdx --tags=$(VERSION) \
			--image-label=org.opencontainers.image.version=$(VERSION) --image-label=org.opencontainers.image.source=$(RELEASE_SOURCE) $(KOFLAGS)"; \
	sign() { \
		if [ -n "$(COSIGN_KEY)" ]; then "$(COSIGN)" sign --yes --key "$(COSIGN_KEY)" $(COSIGNFLAGS) "$$@"; \
		else "$(COSIGN)" sign --yes $(COSIGNFLAGS) "$$@"; fi; \
	}; \
	for ref in $$(awk '$$1 == "newName:" { name = $$2 } $$1 == "digest:" { print name "@" $$2 }' "$$work/images.yaml"); do \
		echo "release $(VERSION): signing $$ref and each platform's image"; \
		sign --recursive "$$ref"; \
	done; \
	for p in $(RELEASE_CLI_PLATFORMS); do \
		echo "release $(VERSION): the reflector CLI for $$p"; \
		CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -trimpath -ldflags=-s\ -w -o "$(DIST)/reflector-$${p%/*}-$${p#*/}" ./cmd/reflector; \
	done; \
	$(GO) run ./hack/release -version $(VERSION) -images "$$work/images.yaml" -out $(DIST); \
	echo "release $(VERSION): signing checksums.txt"; \
	if [ -n "$(COSIGN_KEY)" ]; then set -- --key "$(COSIGN_KEY)"; else set --; fi; \
	"$(COSIGN)" sign-blob --yes "$$@" $(COSIGNBLOBFLAGS) --bundle "$(DIST)/checksums.txt.sigstore.json" "$(DIST)/checksums.txt"; \
	if [ -n "$(RELEASE_PUSH_MANIFESTS)" ]; then \
		echo "release $(VERSION): pushing install.yaml to oci://$(RELEASE_MANIFESTS_REPO):$(VERSION)"; \
		commit=$$(git rev-parse HEAD); \
		"$(FLUX)" push artifact "oci://$(RELEASE_MANIFESTS_REPO):$(VERSION)" --path=$(DIST)/install.yaml \
			--source=$(RELEASE_SOURCE) --revision="$(VERSION)@sha1:$$commit" --reproducible $(FLUXFLAGS) -o json > "$$work/artifact.json"; \
		digest=$$(sed -n 's/.*"digest": *"\(sha256:[0-9a-f]*\)".*/\1/p' "$$work/artifact.json"); \
		test -n "$$digest" || { echo "flux push artifact printed no digest:"; cat "$$work/artifact.json"; exit 1; }; \
		sign "$(RELEASE_MANIFESTS_REPO)@$$digest"; \
		echo "$(RELEASE_MANIFESTS_REPO)@$$digest"; \
	fi; \
	echo "release $(VERSION): wrote $(DIST)/:"; ls $(DIST)
