/**
 * The route table of docs/api.md, made from the service's own OpenAPI document (issue 29): one row
 * per path and summary, its methods (all of them: ANY), the keys it takes and the statuses it
 * answers. test/docs/examples.test.ts compares it with the running service's /openapi.json, and
 * writes it into docs/api.md with DOCS_WRITE=1.
 */

export const TABLE_START = '<!-- openapi-routes:start (generated from GET /openapi.json by test/docs/examples.test.ts; DOCS_WRITE=1 rewrites it; do not edit) -->';
export const TABLE_END = '<!-- openapi-routes:end -->';

interface Operation {
  summary?: string;
  security?: Record<string, string[]>[];
  responses?: Record<string, unknown>;
}
export interface OpenApiDoc {
  paths: Record<string, Record<string, Operation>>;
}

const SCHEMES: Record<string, string> = { ApiKey: '`SVC-API-KEY`', ProxyKey: '`SVC-PROXY-KEY`', ProxyKeyQuery: '`svc-proxy-key` query' };
const ALL = 8;

function keys(security: Record<string, string[]>[] | undefined): string {
  if (!security || security.length === 0) return 'none';
  return security.map((alt) => Object.keys(alt).map((k) => SCHEMES[k] ?? k).join(' + ')).join(', or ');
}

export function routesTable(doc: OpenApiDoc): string {
  const rows: string[] = ['| method | path | what | keys | answers |', '|---|---|---|---|---|'];
  for (const [path, item] of Object.entries(doc.paths)) {
    const groups = new Map<string, { methods: string[]; op: Operation }>();
    for (const [method, op] of Object.entries(item)) {
      const g = groups.get(op.summary ?? '') ?? { methods: [], op };
      g.methods.push(method.toUpperCase());
      groups.set(op.summary ?? '', g);
    }
    for (const [summary, { methods, op }] of groups) {
      const statuses = Object.keys(op.responses ?? {}).filter((s) => s !== 'default').join(', ');
      const method = methods.length === ALL ? 'ANY' : methods.join(', ');
      rows.push(`| ${method} | \`${path}\` | ${summary.replace(/\|/g, '\\|')} | ${keys(op.security)} | ${statuses} |`);
    }
  }
  return rows.join('\n');
}

/** `text` with its table block replaced by `table`. */
export function withRoutesTable(text: string, table: string): string {
  const start = text.indexOf(TABLE_START);
  const end = text.indexOf(TABLE_END);
  if (start < 0 || end < start) throw new Error(`docs/api.md has no block between ${TABLE_START} and ${TABLE_END}`);
  return `${text.slice(0, start + TABLE_START.length)}\n\n${table}\n\n${text.slice(end)}`;
}
