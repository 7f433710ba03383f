# syntax=docker/dockerfile:1
# keepwrap alone: an image that holds only the static keepwrap binary, at
# /keepwrap, for another image to copy it from:
#
#   COPY --from=ghcr.io/keepwrap/keepwrap:VERSION /keepwrap /usr/local/bin/keepwrap
#
# The release workflow (.github/workflows/release.yml) pushes it for
# linux/amd64 and linux/arm64 at each tag v*. Build it from a keepwrap
# checkout:
#
#   docker buildx build --platform linux/amd64,linux/arm64 -t keepwrap .
#
# The build stage is the one of Dockerfile.snippet (SGLang), line for line.

# --- keepwrap: release, statically linked (musl), for the image's architecture.
# Built on the build machine's own platform and cross-linked with the
# toolchain's bundled rust-lld (the musl targets ship their C runtime), so an
# arm64 image builds without emulation and without a C cross toolchain.
FROM --platform=$BUILDPLATFORM rust:1-bookworm AS keepwrap
ARG TARGETARCH
ENV CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_LINKER=rust-lld \
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=rust-lld
WORKDIR /src
# Exactly what `cargo build` reads (Cargo.toml names the benchmarks, so
# their sources must be there even though a build does not compile them;
# .cargo/config.toml builds the static binary without PIE);
# .dockerignore lets in nothing else. .ci/run builds these alone.
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
COPY .cargo ./.cargo
# The crates cargo downloads and its target directory are cache mounts kept
# between builds, so a rebuild compiles only what changed; the target
# directory is gone after the RUN, so the binary is copied out within it.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    case "${TARGETARCH:-amd64}" in \
      amd64) target=x86_64-unknown-linux-musl ;; \
      arm64) target=aarch64-unknown-linux-musl ;; \
      *) echo "unsupported TARGETARCH ${TARGETARCH}" >&2; exit 1 ;; \
    esac \
 && rustup target add "$target" \
 && cargo build --release --locked --target "$target" \
 && install -m 0755 "target/$target/release/keepwrap" /usr/local/bin/keepwrap

# --- the image: the binary and nothing else (no shell, no C library; it
# needs neither). `docker run IMAGE --version` runs it.
FROM scratch
COPY --from=keepwrap /usr/local/bin/keepwrap /keepwrap
ENTRYPOINT ["/keepwrap"]
