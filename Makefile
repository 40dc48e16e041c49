# Two commands matter (see README.md):
#   make bench   the main job: plugin vs perftest on soft-RoCE, in a QEMU guest it sets up
#   make test    every test: host unit/integration tests, then the soft-RoCE guest tests
.PHONY: test bench build plugin doctor deb rpm portable portable-aarch64 clean-testbed

test:
	scripts/test-all.sh

bench:
	benches/run.sh

build:
	cargo build --release -p nccl-net-plugin
	ln -sf libnccl_net_ferro.so target/release/libnccl-net-ferro.so
	@echo "plugin: target/release/libnccl-net-ferro.so  (NCCL_NET_PLUGIN=$$(pwd)/target/release/libnccl-net-ferro.so)"

plugin: build

doctor:
	cargo run --release -p nccl-net-doctor

# The release artefacts that leave the machine (the package, the installer image's inputs): glibc
# symbol versions no newer than 2.17, so they load in older training images than the build host.
# `make build` stays native. `make test` builds and checks the x86_64 one (through the package);
# the aarch64 one (GH200/GB200 nodes) is its own target, cross-built the same way.
portable:
	scripts/build-portable.sh x86_64

portable-aarch64:
	scripts/build-portable.sh aarch64

# The Debian and RPM packages of the portable build (packaging/README.md).
deb:
	scripts/build-deb.sh

rpm:
	scripts/build-rpm.sh

clean-testbed:
	rm -rf .testbed target/guest-out
