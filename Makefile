# Two commands matter (see README.md):
#   make bench   the main job: plugin vs perftest on soft-RoCE, in a QEMU guest it sets up
#   make test    every test: host unit/integration tests, then the soft-RoCE guest tests
.PHONY: test bench build plugin doctor deb clean-testbed

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

deb:
	scripts/build-deb.sh

clean-testbed:
	rm -rf .testbed target/guest-out
