/**
 * The configuration schema: the single source of the config's types, defaults and validation.
 * `npm run schema` writes its JSON Schema to config/tokenproxy.schema.json for editors.
 */
import { z } from 'zod';
import { REACTOR_LIMITS, type ReactorLimitField } from './limits.js';

/**
 * The management reads (GET /applications, /proxies, /reactors, /tenants/self,
 * /permissions): management keys only. A management application that lists none of them holds all
 * of them (src/model/tenants.ts), so a config written before they existed keeps its reads.
 */
export const MANAGEMENT_READ_PERMISSIONS = ['application:read', 'proxy:read', 'reactor:read', 'tenant:read', 'permission:read'] as const;

export const PERMISSIONS = [
  'token:create',
  'token:read',
  'token:update',
  'token:delete',
  'token:search',
  'proxy:invoke',
  'reactor:invoke',
  /** Use tokens inside the service (detokenization for the outbound proxy, transforms, reactor args): private keys only. */
  'token:use',
  /** Read the audit trail (GET /logs): management keys only. */
  'log:read',
  ...MANAGEMENT_READ_PERMISSIONS,
] as const;
export type Permission = (typeof PERMISSIONS)[number];

/** A public key (browsers, mobile apps) may hold only these. */
export const PUBLIC_PERMISSIONS: readonly Permission[] = ['token:create', 'token:update'];
/** Permissions only one application type may hold (checked when the config is loaded). */
export const TYPE_ONLY_PERMISSIONS: ReadonlyArray<{ permission: Permission; type: 'private' | 'management' }> = [
  { permission: 'token:use', type: 'private' },
  { permission: 'log:read', type: 'management' },
  ...MANAGEMENT_READ_PERMISSIONS.map((permission) => ({ permission, type: 'management' as const })),
];

const permission = z.enum(PERMISSIONS, {
  error: (iss) => `unknown permission ${JSON.stringify(iss.input)}`,
});

const uuid = z.string().regex(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i, 'must be a UUID');

/** A container: starts and ends with `/`, lower case, segments of [a-z0-9_-]. */
export const containerPattern = /^\/(?:[a-z0-9_-]+\/)*$/;
const container = z.string().regex(containerPattern, 'must start and end with "/" and be lower case (e.g. /pci/high/)');

const accessRule = z.strictObject({
  priority: z.number().int(),
  container,
  permissions: z.array(permission),
  transform: z.enum(['reveal', 'mask', 'redact']).default('mask'),
});

const apiKey = z.union([
  z.string().min(16, 'an API key must be at least 16 characters'),
  z.strictObject({ sha256: z.string().regex(/^[0-9a-f]{64}$/i, 'must be 64 hex digits') }),
]);

const application = z.strictObject({
  id: uuid,
  name: z.string().min(1),
  type: z.enum(['public', 'private', 'management']),
  keys: z.array(apiKey).min(1),
  permissions: z.array(permission).default([]),
  rules: z.array(accessRule).default([]),
  /** Counted by the spec's legacy (per client IP) rate-limit rules. */
  legacy: z.boolean().default(false),
  /** Web page origins that may use a public application's keys. */
  allowed_origins: z.array(z.string()).default([]),
});

const codeSource = {
  code_file: z.string().optional(),
  code: z.string().optional(),
};

const limit = (field: ReactorLimitField) => {
  const r = REACTOR_LIMITS[field];
  return z.number().int().min(r.min).max(r.max).default(r.default);
};

const reactor = z.strictObject({
  id: z.string().min(1).max(100),
  name: z.string().min(1),
  ...codeSource,
  configuration: z.record(z.string(), z.string()).default({}),
  /** Bounds and defaults: src/config/limits.ts (spec: timeout never above 30 s, hot concurrency 1). */
  timeout_ms: limit('timeout_ms'),
  warm_concurrency: limit('warm_concurrency'),
  max_concurrency: limit('max_concurrency'),
  queue_limit: limit('queue_limit'),
  memory_limit_mb: limit('memory_limit_mb'),
});

/**
 * The token types (src/vault/token-types.ts is the registry; config/ imports nothing from the rest
 * of src/, so the names are listed here and test/vault/token-types.test.ts checks they match).
 */
export const CONFIG_TOKEN_TYPES = ['token', 'card', 'card_number', 'bank', 'us_bank_routing_number', 'us_bank_account_number', 'social_security_number', 'employer_id_number'] as const;

const tokenTemplate = z.strictObject({
  type: z.enum(CONFIG_TOKEN_TYPES),
  /** An alias id expression, e.g. '{{ data | alias_card }}': the destination receives card-shaped aliases. */
  id: z.string().optional(),
  containers: z.array(container).length(1).optional(),
  metadata: z.record(z.string(), z.string()).optional(),
  search_indexes: z.array(z.string()).optional(),
  fingerprint_expression: z.string().optional(),
  mask: z.string().optional(),
  deduplicate_token: z.boolean().optional(),
});

const requestTransform = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('code'), ...codeSource }),
  z.strictObject({
    type: z.literal('tokenize'),
    identifier: z.string().optional(),
    fields: z.array(z.strictObject({ pointer: z.string(), token: tokenTemplate })).min(1),
  }),
  /** Expressions in the body, header values and query swapped for plaintext (needs require_auth). */
  z.strictObject({ type: z.literal('detokenize') }),
]);

const responseTransform = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('code'), ...codeSource }),
  z.strictObject({ type: z.literal('mask'), pattern: z.string(), character: z.string().length(1).default('X') }),
  z.strictObject({ type: z.literal('append_json'), location: z.string(), value: z.string() }),
  z.strictObject({ type: z.literal('append_header'), name: z.string().min(1), value: z.string() }),
]);

/** An origin a tenant may send detokenized data to (docs/detokenization.md "Outbound proxy"). */
const allowedDestination = z.union([
  z.string(),
  z.strictObject({
    origin: z.string(),
    /** A private CA (PEM file) trusted for this destination, on top of the system store. */
    tls: z.strictObject({ ca_file: z.string() }).optional(),
  }),
]);

const outbound = z.strictObject({
  /** Origins (`https://*.stripe.com`); empty: the outbound proxy refuses every destination. */
  allowed_destinations: z.array(allowedDestination).default([]),
  /** Connect, response headers, and between body chunks. */
  timeout_ms: z.number().int().min(1).max(300_000).default(25_000),
});

const proxy = z.strictObject({
  id: z.string().min(1).max(100),
  name: z.string().min(1),
  key: z.string().min(16, 'a proxy key must be at least 16 characters').optional(),
  key_sha256: z.string().regex(/^[0-9a-f]{64}$/i, 'must be 64 hex digits').optional(),
  destination_url: z.url({ protocol: /^https?$/ }),
  require_auth: z.boolean().default(true),
  configuration: z.record(z.string(), z.string()).default({}),
  timeout_ms: z.number().int().min(1).max(300_000).default(25_000),
  request_transforms: z.array(requestTransform).default([]),
  response_transforms: z.array(responseTransform).default([]),
  leak_guard: z.enum(['off', 'log', 'block']).default('log'),
});

export const MITIGATIONS = ['throttle', 'block'] as const;
const rateRuleOverride = z.strictObject({
  points: z.number().int().min(1).optional(),
  duration_seconds: z.number().positive().optional(),
  mitigation: z.enum(MITIGATIONS).optional(),
  block_seconds: z.number().positive().optional(),
});

const tenant = z.strictObject({
  id: uuid,
  name: z.string().min(1),
  test: z.boolean().default(false),
  max_tokens_per_request: z.number().int().min(1).max(100).default(100),
  rate_limit_tier: z.enum(['default', 'higher']).default('default'),
  /** Per-rule overrides of points, window and mitigation, keyed by rule name. */
  custom_rate_limits: z.record(z.string(), rateRuleOverride).default({}),
  applications: z.array(application).default([]),
  reactors: z.array(reactor).default([]),
  proxies: z.array(proxy).default([]),
  outbound: outbound.prefault({}),
});

/**
 * Where a Redis is (the token store's and the rate limits'): `url` (one node), `cluster` or
 * `sentinel` (src/redis/connect.ts); at most one of them (checked by the loader).
 */
const secretRef = z.union([z.string().min(1), z.strictObject({ file: z.string().min(1) })]);
const redisTopology = {
  cluster: z.strictObject({ nodes: z.array(z.string().min(1)).min(1) }).optional(),
  sentinel: z
    .strictObject({
      sentinels: z.array(z.string().min(1)).min(1),
      name: z.string().min(1),
      password: secretRef.optional(),
    })
    .optional(),
  username: z.string().optional(),
  password: secretRef.optional(),
  tls: z.union([z.boolean(), z.strictObject({ ca_file: z.string().optional() })]).optional(),
};

/** `rate_limits.table` when not given. */
export const DEFAULT_RATE_LIMIT_TABLE = 'rate_limits';

export const configSchema = z.strictObject({
  server: z
    .strictObject({
      host: z.string().default('127.0.0.1'),
      /**
       * Worker processes serving the port (node:cluster); 'auto' is one per core
       * (os.availableParallelism()). 1 runs no cluster at all.
       */
      workers: z.union([z.number().int().min(1).max(256), z.literal('auto')]).default(1),
      port: z.number().int().min(0).max(65535).default(8080),
      /** Spec: 5 MB payload limit for reactors and transforms; also the body limit of every route. */
      body_limit_bytes: z.number().int().min(1).max(100 * 1024 * 1024).default(5 * 1024 * 1024),
      max_depth: z.number().int().min(1).max(1000).default(64),
      /** CIDRs whose X-Forwarded-For is believed. */
      trust_proxy: z.array(z.string()).default([]),
      /**
       * Per-IP rate limits count an IPv6 client by its network of this many bits (one
       * host owns a /64 and rotating inside it passed every per-IP limit).
       */
      ipv6_prefix: z.number().int().min(1).max(128).default(64),
      request_timeout_ms: z.number().int().min(1000).default(60_000),
      /** On SIGTERM/SIGINT, requests in flight get this long to finish before they are cut. */
      shutdown_grace_ms: z.number().int().min(0).max(600_000).default(10_000),
      /**
       * A new connection must send its first request's headers within this time, or it is closed
       * (nginx's client_header_timeout); idle keep-alive connections keep their own timeout.
       */
      request_header_timeout_ms: z.number().int().min(100).default(30_000),
      /**
       * After an early answer (413, 429, 401/403/415 before the body was read), the rest of the
       * body is read and discarded for at most this long before the connection is closed, so the
       * client reads the answer instead of a reset (nginx's lingering_time).
       */
      lingering_time_ms: z.number().int().min(0).max(60_000).default(5_000),
      /** The same bound in bytes discarded; default (when absent) twice body_limit_bytes. */
      lingering_max_bytes: z.number().int().min(0).optional(),
      /** Where `tokenproxy start` writes its process id (for `tokenproxy reload`); none when absent. */
      pid_file: z.string().optional(),
      /**
       * `production` refuses to start with a generated or co-located master key or a
       * published development key (src/production.ts), or on a Redis store without an append-only
       * file (src/store/redis/durability.ts). NODE_ENV=production sets it too.
       */
      mode: z.enum(['development', 'production']).default('development'),
      /**
       * a second listener for operators (today `/metrics`), loopback unless told
       * otherwise, so the public listener does not serve it. Supersedes metrics.port/host.
       */
      admin: z
        .strictObject({
          host: z.string().default('127.0.0.1'),
          port: z.number().int().min(0).max(65535),
        })
        .optional(),
    })
    .prefault({}),
  store: z
    .strictObject({
      kind: z.enum(['embedded', 'redis', 'postgres']).default('embedded'),
      path: z.string().default('./data/tokens.db'),
      /**
       * Redis: absent with neither cluster nor sentinel, redis://127.0.0.1:6379 (src/redis/connect.ts).
       * PostgreSQL: required, postgres://user@host:port/db?sslmode=… (pg's parser).
       */
      url: z.string().optional(),
      ...redisTopology,
      key_prefix: z.string().default('tp:'),
      /** After each write, WAIT for this many replicas (0: do not wait; docs/storage.md "Storage and durability"). */
      wait_replicas: z.number().int().min(0).max(16).default(0),
      wait_timeout_ms: z.number().int().min(1).max(60_000).default(500),
      /**
       * Redis: what a start accepts of the primaries' persistence (src/store/redis/durability.ts).
       * `require_aof`: production mode refuses a Redis without an append-only file.
       */
      durability: z.enum(['require_aof', 'accept_loss']).default('require_aof'),
      /** PostgreSQL: connections per process (src/store/postgres/pool.ts). */
      pool_size: z.number().int().min(1).max(1000).default(10),
      /** The cvc is purged after a retention window (docs/api.md "Token definitions"). */
      cvc_retention_seconds: z.number().int().min(0).default(3600),
      /**
       * How often a running instance reloads the data keys from the store, to pick up a key that
       * `tokenproxy rotate-data-key` (or another instance) added; 0: only on reload and when a
       * value names a key this instance does not hold yet.
       */
      data_key_refresh_seconds: z.number().int().min(0).default(30),
    })
    .prefault({}),
  secrets: z
    .strictObject({
      master_key_file: z.string().optional(),
      /**
       * The master key as a key-encrypting key in an HSM (src/crypto/pkcs11.ts). The PIN comes from
       * a file or an environment variable, never from this file.
       */
      master_key: z
        .strictObject({
          kind: z.literal('pkcs11'),
          module: z.string().min(1),
          token_label: z.string().min(1).max(32),
          key_label: z.string().min(1),
          pin_file: z.string().min(1).optional(),
          pin_env: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'the name of an environment variable').optional(),
          mechanism: z.enum(['auto', 'aes_key_wrap_pad', 'aes_key_wrap', 'aes_gcm']).default('auto'),
        })
        .optional(),
    })
    .prefault({}),
  log: z
    .strictObject({
      level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
    })
    .prefault({}),
  rate_limits: z
    .strictObject({
      enabled: z.boolean().default(true),
      store: z.enum(['memory', 'redis', 'postgres']).default('memory'),
      url: z.string().optional(),
      ...redisTopology,
      key_prefix: z.string().default('tp:rl:'),
      /**
       * PostgreSQL: the counters' table, in the token store's schema `tokenproxy`. A
       * plain lower-case identifier: the SQL that names it needs no escaping.
       */
      table: z.string().regex(/^[a-z_][a-z0-9_]{0,62}$/, 'a lower-case SQL identifier: a-z, 0-9 and _, at most 63 characters, not starting with a digit').default(DEFAULT_RATE_LIMIT_TABLE),
      on_store_error: z.enum(['reject', 'allow']).default('reject'),
      timeout_ms: z.number().int().min(1).default(200),
    })
    .prefault({}),
  /** GET /metrics (docs/operations.md "Metrics"): not rate limited, not API-key authenticated. */
  metrics: z
    .strictObject({
      enabled: z.boolean().default(true),
      /**
       * When set, /metrics requires `Authorization: Bearer <token>`: the token itself, or its SHA-256
       * (`{ sha256: "…" }`, as `tokenproxy hash-key` prints) to keep it out of the file.
       */
      token: z
        .union([
          z.string().min(16, 'a metrics token must be at least 16 characters'),
          z.strictObject({ sha256: z.string().regex(/^[0-9a-f]{64}$/i, 'must be 64 hex digits') }),
        ])
        .optional(),
      /** When set, /metrics is served only on this port (a listener of its own), not on server.port. */
      port: z.number().int().min(0).max(65535).optional(),
      /** Address of that listener; default server.host. */
      host: z.string().optional(),
    })
    .prefault({}),
  /** What the service keeps of asynchronous reactor calls (api/reactor-results.ts). */
  reactors: z
    .strictObject({
      async_result_ttl_seconds: z.number().int().min(1).max(30 * 86_400).default(86_400),
    })
    .prefault({}),
  tenants: z.array(tenant).default([]),
});

export type Config = z.infer<typeof configSchema>;
export type TenantConfig = Config['tenants'][number];
export type ApplicationConfig = TenantConfig['applications'][number];
export type AccessRuleConfig = ApplicationConfig['rules'][number];
export type ReactorConfig = TenantConfig['reactors'][number];
export type ProxyConfig = TenantConfig['proxies'][number];
export type RequestTransformConfig = ProxyConfig['request_transforms'][number];
export type ResponseTransformConfig = ProxyConfig['response_transforms'][number];
export type TokenTemplateConfig = z.infer<typeof tokenTemplate>;
export type RateRuleOverride = z.infer<typeof rateRuleOverride>;
