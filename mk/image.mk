# mk/image.mk - container images of forceai-runner (included by the Makefile).
#
#   make image            installs what the build needs (scripts/install-deps.sh
#                         image: musl, busybox-static, podman + its host config),
#                         then forceai/runtime-runner:latest (FROM scratch),
#                         forceai/runtime-runner:opensandbox-execd and the lean
#                         Python variant forceai/runtime-runner:python, also tagged
#                         forceai/runtime-runner:local: the gateway's default
#                         FORCEAI_RUNTIME_RUNNER_IMAGE, so a local gateway stack
#                         picks it up with no setting (image/README.md "Tags").
#                         IMAGE_LOCAL_FROM=code tags (and builds) :code instead,
#                         =latest the minimal image; IMAGE_LOCAL_FROM= tags none.
#                         Each image is rebuilt only when its inputs changed (a
#                         stamp per image under build/image-stamps/, dropped when
#                         the engine no longer has the image).
#   make image-build      the same without the package step
#   make image-python     forceai/runtime-runner:python on a local Debian 12 +
#                         python3 base (debootstrap + import, no registry)
#   make image-code       forceai/runtime-runner:code: the same with IPython,
#                         numpy, pandas, matplotlib (code contexts, /code)
#   make image-sizes      measure the built images and rewrite the sizes table
#                         of image/README.md (image/sizes.sh; --check compares)
#   make image-coding-agent  forceai/runtime-runner:coding-agent: the runner on Debian 12 +
#                         Node.js with a coding-agent CLI from npm (AGENT=codex|claude-code|all;
#                         image/coding-agent.sh, offline: Debian mirror and npm only)
#   make container-test   tests/container/run.sh (podman, as root)
#   make run-container    build, run detached on 127.0.0.1, print endpoint,
#                         token and a curl (`make run` = install-deps run + this);
#                         it runs :local, what the gateway runs (so the seed's
#                         python3 example works), or :latest when IMAGE_LOCAL_FROM=
#                         is empty; IMAGE_RUN_TAG=latest runs the minimal image
#
# Needs: the `static` target (build/static/forceai-runner), podman (or docker
# with BuildKit), root for podman here; scripts/podman-setup.sh prepares a host.

# an engine named by the user goes to scripts/install-deps.sh; the default is
# chosen again by the sub-make that runs after the packages are installed
IMAGE_ENGINE_ASKED := $(if $(filter environment command line,$(origin IMAGE_ENGINE)),$(IMAGE_ENGINE))
# podman when installed; docker only when its daemon answers (a docker CLI
# alone does not build anything); else podman, which `make image` installs
ifeq ($(origin IMAGE_ENGINE),undefined)
IMAGE_ENGINE      := $(shell if command -v podman >/dev/null 2>&1; then echo podman; \
                       elif docker info >/dev/null 2>&1; then echo docker; else echo podman; fi)
endif
IMAGE_DEPS         = IMAGE_ENGINE="$(IMAGE_ENGINE_ASKED)" scripts/install-deps.sh
IMAGE_NAME        ?= forceai/runtime-runner
IMAGE_TAG         ?= latest
IMAGE_PYTHON_TAG  ?= python
IMAGE_CODE_TAG    ?= code
IMAGE_EXECD_TAG   ?= opensandbox-execd
IMAGE_LOCAL_TAG   ?= local
IMAGE_LOCAL_FROM  ?= $(IMAGE_PYTHON_TAG)
IMAGE_PYTHON_BASE ?= localhost/forceai-base-python:bookworm
IMAGE_CODE_BASE   ?= localhost/forceai-base-code:bookworm
IMAGE_RUNNER_BIN  ?= build/static/forceai-runner
IMAGE_ROOTFS      ?= build/image-rootfs
# evaluated once (:=), unless given on the command line or in the environment
ifeq ($(origin IMAGE_VERSION),undefined)
IMAGE_VERSION     := $(shell sed -n 's/.*FORCEAI_RUNNER_VERSION "\(.*\)".*/\1/p' runner/core/version.h 2>/dev/null | head -n1)
endif
ifeq ($(origin IMAGE_REVISION),undefined)
IMAGE_REVISION    := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
endif
ifeq ($(origin IMAGE_CREATED),undefined)
IMAGE_CREATED     := $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
endif
IMAGE_SOURCE      ?= https://github.com/forceai/forceai-runner
IMAGE_LICENSES    ?= NOASSERTION
IMAGE_PORT        ?= 8080
IMAGE_CONTAINER   ?= forceai-runner
# `make run` runs what the gateway runs by default (:local), not the minimal image
COMMA             := ,
IMAGE_RUN_TAG     ?= $(if $(IMAGE_LOCAL_FROM),$(IMAGE_LOCAL_TAG),$(IMAGE_TAG))
# `make run`: the root runner with only the capabilities it needs
# (docs/design/code.md#how-the-interpreter-is-driven); IMAGE_RUN_FLAGS= gives the engine's default set
IMAGE_RUN_FLAGS   ?= --cap-drop ALL --cap-add SETUID,SETGID,SETPCAP,CHOWN,KILL,DAC_OVERRIDE,FOWNER,FSETID

# podman: no network for RUN steps (nothing is downloaded), one layer on top
# of the base (vfs copies the whole rootfs for every intermediate layer)
ifeq ($(notdir $(IMAGE_ENGINE)),podman)
IMAGE_BUILD_FLAGS ?= --network none --layers=false
else
IMAGE_BUILD_FLAGS ?= --network none
endif

IMAGE_LABEL_ARGS = --build-arg VERSION=$(or $(IMAGE_VERSION),0.0.0-dev) \
	--build-arg REVISION=$(IMAGE_REVISION) --build-arg CREATED=$(IMAGE_CREATED) \
	--build-arg SOURCE=$(IMAGE_SOURCE) --build-arg LICENSES=$(IMAGE_LICENSES)

.PHONY: image image-build image-python image-code image-sizes image-coding-agent \
	container-test run-container

# One stamp per image, named by image and tag: it is newer than the image's inputs
# when the image is current, so an unchanged tree builds nothing. What an image is
# made of (the labels' revision and date are those of its last build):
IMAGE_STAMPS        = build/image-stamps/$(subst /,+,$(IMAGE_NAME))
IMAGE_COMMON_INPUTS = $(IMAGE_RUNNER_BIN) Containerfile image/install.sh image/applets \
	image/stage-rootfs.sh seccomp/default.json .containerignore mk/image.mk
IMAGE_EXECD_INPUTS  = $(IMAGE_COMMON_INPUTS) image/opensandbox/Containerfile \
	image/opensandbox/bootstrap.sh
IMAGE_BASE_INPUTS   = $(IMAGE_COMMON_INPUTS) image/base-python.sh
# the two always, and :python / :code when :local or `make run` names them
IMAGE_BUILT_TAGS    = $(IMAGE_TAG) $(IMAGE_EXECD_TAG) \
	$(sort $(filter $(IMAGE_PYTHON_TAG) $(IMAGE_CODE_TAG),$(IMAGE_LOCAL_FROM) $(IMAGE_RUN_TAG)))

# A stamp whose image the engine no longer has (removed, pruned, another storage)
# would keep it from being built again: drop it first.
define image_forget_missing
	@for t in $(1); do \
		$(IMAGE_ENGINE) image inspect $(IMAGE_NAME):$$t >/dev/null 2>&1 || rm -f $(IMAGE_STAMPS)/$$t; \
	done
endef

# recursive: the engine is only known once install-deps has run
image:
	@$(IMAGE_DEPS) image
	@$(MAKE) --no-print-directory image-build

image-build: static
	$(call image_forget_missing,$(IMAGE_BUILT_TAGS))
	@$(MAKE) --no-print-directory $(addprefix $(IMAGE_STAMPS)/,$(IMAGE_BUILT_TAGS))
	$(if $(IMAGE_LOCAL_FROM),$(IMAGE_ENGINE) tag $(IMAGE_NAME):$(IMAGE_LOCAL_FROM) $(IMAGE_NAME):$(IMAGE_LOCAL_TAG))
	$(if $(IMAGE_LOCAL_FROM),@echo "image: $(IMAGE_NAME):$(IMAGE_LOCAL_TAG) is $(IMAGE_NAME):$(IMAGE_LOCAL_FROM) (the gateway's default FORCEAI_RUNTIME_RUNNER_IMAGE; sizes: make image-sizes)")

image-python: static
	$(call image_forget_missing,$(IMAGE_PYTHON_TAG))
	@$(MAKE) --no-print-directory $(IMAGE_STAMPS)/$(IMAGE_PYTHON_TAG)

image-code: static
	$(call image_forget_missing,$(IMAGE_CODE_TAG))
	@$(MAKE) --no-print-directory $(IMAGE_STAMPS)/$(IMAGE_CODE_TAG)

image-sizes:
	ENGINE=$(IMAGE_ENGINE) IMAGE=$(IMAGE_NAME) image/sizes.sh

$(IMAGE_STAMPS)/$(IMAGE_TAG): $(IMAGE_COMMON_INPUTS)
	image/stage-rootfs.sh $(IMAGE_ROOTFS)
	$(IMAGE_ENGINE) build $(IMAGE_BUILD_FLAGS) $(IMAGE_LABEL_ARGS) \
		-f Containerfile -t $(IMAGE_NAME):$(IMAGE_TAG) .
	-@$(IMAGE_ENGINE) image prune -f --filter label=io.forceai.runner.image >/dev/null 2>&1
	@$(IMAGE_ENGINE) image inspect --format '{{.Size}}' $(IMAGE_NAME):$(IMAGE_TAG) 2>/dev/null \
		| awk '{ printf "image: $(IMAGE_NAME):$(IMAGE_TAG) %d bytes (%.2f MB)\n", $$1, $$1 / 1e6 }'
	@mkdir -p $(@D) && touch $@

$(IMAGE_STAMPS)/$(IMAGE_EXECD_TAG): $(IMAGE_EXECD_INPUTS)
	image/stage-rootfs.sh $(IMAGE_ROOTFS)
	$(IMAGE_ENGINE) build $(IMAGE_BUILD_FLAGS) $(IMAGE_LABEL_ARGS) \
		-f image/opensandbox/Containerfile -t $(IMAGE_NAME):$(IMAGE_EXECD_TAG) .
	-@$(IMAGE_ENGINE) image prune -f --filter label=io.forceai.runner.image >/dev/null 2>&1
	@mkdir -p $(@D) && touch $@

# :python (lean, python3 only) and :code (IPython and the libraries code contexts
# want) are the same Containerfile on two Debian bases (image/base-python.sh TIER=)
$(IMAGE_STAMPS)/$(IMAGE_PYTHON_TAG): $(IMAGE_BASE_INPUTS)
	image/stage-rootfs.sh $(IMAGE_ROOTFS)
	TIER=python ENGINE=$(IMAGE_ENGINE) image/base-python.sh $(IMAGE_PYTHON_BASE)
	$(IMAGE_ENGINE) build $(IMAGE_BUILD_FLAGS) $(IMAGE_LABEL_ARGS) \
		--build-arg BASE=$(IMAGE_PYTHON_BASE) \
		-f Containerfile -t $(IMAGE_NAME):$(IMAGE_PYTHON_TAG) .
	-@$(IMAGE_ENGINE) image prune -f --filter label=io.forceai.runner.image >/dev/null 2>&1
	@mkdir -p $(@D) && touch $@

$(IMAGE_STAMPS)/$(IMAGE_CODE_TAG): $(IMAGE_BASE_INPUTS)
	image/stage-rootfs.sh $(IMAGE_ROOTFS)
	TIER=code ENGINE=$(IMAGE_ENGINE) image/base-python.sh $(IMAGE_CODE_BASE)
	$(IMAGE_ENGINE) build $(IMAGE_BUILD_FLAGS) $(IMAGE_LABEL_ARGS) \
		--build-arg BASE=$(IMAGE_CODE_BASE) \
		-f Containerfile -t $(IMAGE_NAME):$(IMAGE_CODE_TAG) .
	-@$(IMAGE_ENGINE) image prune -f --filter label=io.forceai.runner.image >/dev/null 2>&1
	@mkdir -p $(@D) && touch $@

image-coding-agent: static
	ENGINE=$(IMAGE_ENGINE) IMAGE=$(IMAGE_NAME) BUILD_FLAGS="$(IMAGE_BUILD_FLAGS)" \
		image/coding-agent.sh

container-test: static
	IMAGE_ENGINE=$(IMAGE_ENGINE) IMAGE_NAME=$(IMAGE_NAME) tests/container/run.sh

run-container: image-build
	IMAGE_ENGINE=$(IMAGE_ENGINE) IMAGE=$(IMAGE_NAME):$(IMAGE_RUN_TAG) PORT=$(IMAGE_PORT) \
		NAME=$(IMAGE_CONTAINER) RUN_FLAGS="$(IMAGE_RUN_FLAGS)" \
		IMAGE_ABOUT="$(if $(filter $(IMAGE_LOCAL_TAG),$(IMAGE_RUN_TAG)),= :$(IMAGE_LOCAL_FROM)$(COMMA) the gateway's default image)" \
		image/run-container.sh
