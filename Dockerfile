# tokenproxy container image: `docker build -t tokenproxy .`
# Stage 1 builds the native modules (isolated-vm, better-sqlite3: python3, make, g++) and the
# TypeScript; stage 2 carries only what runs, as a non-root user. Node 24 (the active LTS): the
# optional dependencies pick the isolated-vm and better-sqlite3 builds for it (see docs/getting-started.md).
ARG NODE_VERSION=24

FROM node:${NODE_VERSION}-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY bin ./bin
COPY scripts/build-if-stale.mjs ./scripts/
RUN npm ci --no-audit --no-fund \
 && npm prune --omit=dev --no-audit --no-fund

FROM node:${NODE_VERSION}-slim
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY bin ./bin
COPY config ./config
COPY reactors ./reactors
COPY public ./public
# The embedded store's file lives here; mount a volume to keep it (and back it up with the master key).
RUN mkdir -p /app/data && chown node:node /app/data
USER node
ENV HOST=0.0.0.0 PORT=8080
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD node -e "fetch('http://127.0.0.1:' + (process.env.PORT || 8080) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"
# A reactor host process is forked with --no-node-snapshot; the main process needs no flag.
CMD ["node", "dist/main.js", "start"]
