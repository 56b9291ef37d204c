# worksession: one binary (agent, bridge, crd) on a small non-root runtime that has tmux.
#
# Harnesses run inside the tmux server's container (the chart's "tmux" container uses this image too), so add yours
# by building on this image:
#   FROM ghcr.io/worksession/worksession:0.1.0
#   USER root
#   RUN apt-get update && apt-get install -y --no-install-recommends nodejs npm \
#       && npm install -g @anthropic-ai/claude-code && rm -rf /var/lib/apt/lists/*
#   USER 1000:1000
# or mount it from the host (agent.extraVolumes / agent.extraVolumeMounts in the chart) and name its path as the
# profile's `binary` in the agent config.

FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
COPY tests ./tests
RUN cargo build --release --locked --bin worksession

FROM debian:bookworm-slim
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends tmux ca-certificates git openssh-client \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 1000 --user-group --create-home --home-dir /home/worksession worksession
COPY --from=build /src/target/release/worksession /usr/local/bin/worksession
USER 1000:1000
WORKDIR /home/worksession
ENTRYPOINT ["/usr/local/bin/worksession"]
