/** The config's JSON Schema, generated from the zod schema (the single source). */
import { z } from 'zod';
import { configSchema } from './schema.js';

export function configJsonSchema(): Record<string, unknown> {
  return {
    ...z.toJSONSchema(configSchema, { io: 'input', unrepresentable: 'any' }),
    title: 'tokenproxy configuration',
  };
}

export function configJsonSchemaText(): string {
  return JSON.stringify(configJsonSchema(), null, 2) + '\n';
}
