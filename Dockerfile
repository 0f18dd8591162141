# The agentgate image for people who build with a container engine. It is
# equivalent to `make image` (hack/image.sh, which needs no engine): the same
# four binaries built the same way, libz3 from the z3-solver wheel beside
# them (RUNPATH $ORIGIN/../lib), nft for `agentgate-proxy init-net`, the
# shared libraries they need from Debian 12, user 65532.
#
#   docker build -t ghcr.io/agentgate-dev/agentgate:0.1.0 .
FROM rust:1-bookworm AS build
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3 python3-pip python3-venv unzip patchelf nftables clang \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# make build: release binaries and the static agentgate-exec; make dist packs
# them relocatably with libz3 (the same step the OCI archive starts from).
RUN make dist \
 && mkdir /out \
 && tar -C /out --strip-components=1 -xzf dist/agentgate-*-linux-amd64.tar.gz

FROM debian:bookworm-slim
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nftables \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd -g 1337 agentgate-proxy && useradd -u 1337 -g 1337 -M -s /sbin/nologin agentgate-proxy \
 && groupadd -g 65532 nonroot && useradd -u 65532 -g 65532 -m -d /home/nonroot -s /sbin/nologin nonroot
COPY --from=build /out/bin/ /usr/local/bin/
COPY --from=build /out/lib/ /usr/local/lib/
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="agentgate" \
      org.opencontainers.image.description="agentgate operator, CLI and sandbox data plane (agentgate-proxy, agentgate-exec)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/agentgate-dev/agentgate" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/agentgate"]
