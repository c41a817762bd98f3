/**
 * Permissions and access rules (compat.md): rules are checked in ascending priority and the
 * first whose container is a prefix of the token's container decides; none decides → denied.
 * An application without rules holds its plain permissions on every container, with `mask`.
 */
import type { ApplicationConfig, Permission } from '../config/schema.js';

export type Transform = 'reveal' | 'mask' | 'redact';

const sortedRules = new WeakMap<ApplicationConfig, ApplicationConfig['rules']>();

function rulesOf(app: ApplicationConfig): ApplicationConfig['rules'] {
  let rules = sortedRules.get(app);
  if (!rules) {
    rules = [...app.rules].sort((a, b) => a.priority - b.priority);
    sortedRules.set(app, rules);
  }
  return rules;
}

/** Whether the application holds `permission` anywhere (the route-level check). */
export function holds(app: ApplicationConfig, permission: Permission): boolean {
  return app.permissions.includes(permission) || app.rules.some((r) => r.permissions.includes(permission));
}

/** The transform granted for `permission` on `container`, or null when denied. */
export function grant(app: ApplicationConfig, permission: Permission, container: string): Transform | null {
  const rules = rulesOf(app);
  if (rules.length === 0) return app.permissions.includes(permission) ? 'mask' : null;
  for (const rule of rules) {
    if (container.startsWith(rule.container)) return rule.permissions.includes(permission) ? rule.transform : null;
  }
  return null;
}
