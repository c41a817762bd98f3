/**
 * A proxied body as the transforms see it: the bytes as received, parsed on first need (JSON or
 * form-urlencoded), and serialized again only when a transform changed it, so an untouched body
 * is forwarded byte for byte.
 */
import { ServiceError } from '../errors.js';
import { isJsonType, jsonDepthExceeds } from '../http/body.js';

export const FORM_TYPE = 'application/x-www-form-urlencoded';

export class ProxyBody {
  private json: { value: unknown } | undefined;
  private form: URLSearchParams | undefined;
  private dirty = false;

  constructor(
    private bytes: Buffer,
    /** Media type of the body (lower case, no parameters). */
    readonly mediaType: string,
    private readonly maxDepth: number,
  ) {}

  get isEmpty(): boolean {
    return !this.dirty && this.bytes.length === 0;
  }

  get isJson(): boolean {
    return isJsonType(this.mediaType);
  }

  get isForm(): boolean {
    return this.mediaType === FORM_TYPE;
  }

  /** The parsed JSON (undefined for an empty body). */
  jsonValue(): unknown {
    if (this.json) return this.json.value;
    if (this.bytes.length === 0) return undefined;
    if (jsonDepthExceeds(this.bytes, this.maxDepth)) {
      throw new ServiceError('nesting_too_deep', { detail: `The body is nested deeper than ${this.maxDepth} levels` });
    }
    try {
      this.json = { value: JSON.parse(this.bytes.toString('utf8')) };
    } catch {
      throw new ServiceError('invalid_json', { detail: 'The body is declared as JSON but does not parse' });
    }
    return this.json.value;
  }

  formParams(): URLSearchParams {
    this.form ??= new URLSearchParams(this.bytes.toString('utf8'));
    return this.form;
  }

  /** What a code transform sees: parsed JSON for JSON bodies, else the text. */
  forCode(): unknown {
    return this.isJson ? this.jsonValue() : this.text();
  }

  text(): string {
    return this.serialize().toString('utf8');
  }

  /** A transform changed the JSON value in place (or replaced it). */
  setJson(value: unknown): void {
    this.json = { value };
    this.form = undefined;
    this.dirty = true;
  }

  /** The form parameters were changed in place. */
  markFormChanged(): void {
    this.dirty = true;
  }

  /** A code transform returned a body: objects are JSON, strings are taken as they are. */
  replace(body: unknown): void {
    if (typeof body === 'string') {
      this.bytes = Buffer.from(body, 'utf8');
      this.json = undefined;
      this.form = undefined;
      this.dirty = false;
      return;
    }
    this.setJson(body ?? null);
  }

  serialize(): Buffer {
    if (!this.dirty) return this.bytes;
    if (this.json) this.bytes = Buffer.from(JSON.stringify(this.json.value) ?? '', 'utf8');
    else if (this.form) this.bytes = Buffer.from(this.form.toString(), 'utf8');
    this.dirty = false;
    return this.bytes;
  }
}
