// A small typed JSON Schema builder: `s.object({ a: s.number() })` is both the schema the host
// validates arguments against and, in TypeScript, the type the handler receives.

class Schema {
  constructor(json, optional = false) {
    this.json = json;
    this.isOptional = optional;
  }
  /** The same schema with a description (shown to the model). */
  describe(text) {
    return new Schema({ ...this.json, description: text }, this.isOptional);
  }
  /** The same schema, not required in an object. */
  optional() {
    return new Schema(this.json, true);
  }
  /** The same schema, not required, with a default the model sees. */
  default(value) {
    return new Schema({ ...this.json, default: value }, true);
  }
}

function object(properties, options = {}) {
  const props = {};
  const required = [];
  for (const [name, schema] of Object.entries(properties)) {
    if (!(schema instanceof Schema)) throw new TypeError(`s.object: property ${name} is not a schema`);
    props[name] = schema.json;
    if (!schema.isOptional) required.push(name);
  }
  const json = { type: 'object', properties: props };
  if (required.length) json.required = required;
  if (options.strict) json.additionalProperties = false;
  return new Schema(json);
}

export const s = {
  string: (options = {}) => new Schema({ type: 'string', ...options }),
  number: (options = {}) => new Schema({ type: 'number', ...options }),
  integer: (options = {}) => new Schema({ type: 'integer', ...options }),
  boolean: () => new Schema({ type: 'boolean' }),
  enum: (values) => new Schema({ enum: [...values] }),
  array: (items, options = {}) => new Schema({ type: 'array', items: items.json, ...options }),
  record: (values) => new Schema({ type: 'object', additionalProperties: values.json }),
  object,
  union: (...options) => new Schema({ anyOf: options.map((o) => o.json) }),
  nullable: (schema) => new Schema({ anyOf: [schema.json, { type: 'null' }] }, schema.isOptional),
  any: () => new Schema({}),
  /** A JSON Schema given as is (its TypeScript type is `unknown`). */
  json: (json) => new Schema(json),
};

export function isSchema(value) {
  return value instanceof Schema;
}
