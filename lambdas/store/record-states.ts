/**
 * Status flows of stored records. A record type declares, once, which status may follow which:
 *
 *   export const VesselStates = defineStates({
 *     queued: ['running', 'canceled'],
 *     running: ['completed', 'failed', 'canceled'],
 *     completed: [],
 *     failed: [],
 *     canceled: [],
 *   });
 *
 * and every transition is one conditional write from the states the flow allows it to start from, so two writers
 * racing on one record cannot both move it (the second finds the status changed and is refused with what it saw):
 *
 *   const t = VesselStates.transition('running', { from: 'queued' });
 *   const r = await conditionalUpdate({
 *     TableName, Key,
 *     UpdateExpression: `SET ${t.set}, startedAt = :at`,
 *     ConditionExpression: t.condition,
 *     ExpressionAttributeNames: { ...t.names },
 *     ExpressionAttributeValues: { ...t.values, ':at': now },
 *   });
 */

/** A piece of a condition expression with the placeholders it uses. */
export interface ConditionFragment {
  expression: string;
  names: Record<string, string>;
  values: Record<string, string>;
}

/** What a transition adds to an UpdateItem: the condition, the SET clause, and the placeholders of both. */
export interface TransitionFragment {
  /** `#status IN (:s0, …)` over the states the move may start from. */
  condition: string;
  /** `#status = :sTo`, for the UpdateExpression's SET. */
  set: string;
  names: Record<string, string>;
  values: Record<string, string>;
}

export interface PlaceholderOptions {
  /** The attribute holding the status (default `status`, a DynamoDB reserved word, hence always a name placeholder). */
  attribute?: string;
  /** Name placeholder for it (default `#status`). */
  name?: string;
  /** Prefix of the value placeholders (default `:s`, giving `:s0`, `:s1`, … and `:sTo`). */
  valuePrefix?: string;
  /**
   * The map attribute the status is nested in, with its name placeholder: `{ attribute: 'webhook', name: '#w' }` makes
   * the status `#w.#status` (a webhook delivery's status lives in its vessel's `webhook` map).
   */
  within?: { attribute: string; name: string };
}

export interface RecordStates<S extends string> {
  /** Every status, in declaration order. */
  readonly statuses: readonly S[];
  /** Statuses no transition leaves. */
  readonly terminal: readonly S[];
  /** Statuses no transition reaches: where a record starts. */
  readonly initial: readonly S[];
  /** True when `value` is one of the statuses (for reading stored records). */
  is(value: unknown): value is S;
  isTerminal(status: S): boolean;
  canMove(from: S, to: S): boolean;
  /** The statuses a record may move to from `from`. */
  targetsOf(from: S): readonly S[];
  /** The statuses a move to `to` may start from. */
  sourcesOf(to: S): readonly S[];
  /** Condition "the status is one of `statuses`": `#status IN (:s0, :s1)`. */
  statusIn(statuses: readonly S[], options?: PlaceholderOptions): ConditionFragment;
  /**
   * A move to `to`, conditioned on the record being in `from` (one status or several), or by default in any status
   * the flow allows the move from. Throws when the flow allows no such move.
   */
  transition(to: S, options?: PlaceholderOptions & { from?: S | readonly S[] }): TransitionFragment;
}

/** DynamoDB's limit on the operands of one IN. */
const MAX_IN_OPERANDS = 100;

/**
 * Builds a record type's status module from its flow: each status maps to the statuses it may move to. The statuses
 * are the flow's keys; a target that is not one of them is a type error (and a runtime one).
 */
export function defineStates<S extends string>(flow: { readonly [K in S]: readonly NoInfer<S>[] }): RecordStates<S> {
  const statuses = Object.keys(flow) as S[];
  const known = new Set<string>(statuses);
  const targets = new Map<S, readonly S[]>();
  for (const from of statuses) {
    const to = flow[from];
    for (const t of to) if (!known.has(t)) throw new RangeError(`Status ${from} moves to ${t}, which is not a status`);
    if (new Set(to).size !== to.length) throw new RangeError(`Status ${from} lists a target twice`);
    targets.set(from, Object.freeze([...to]));
  }
  const sources = new Map<S, readonly S[]>(statuses.map((to) => [to, Object.freeze(statuses.filter((from) => targets.get(from)!.includes(to)))]));

  const is = (value: unknown): value is S => typeof value === 'string' && known.has(value);
  const assertStatus = (value: S, what: string) => {
    if (!is(value)) throw new RangeError(`${what} ${String(value)} is not a status`);
  };

  /** The status's path in expressions, and the name placeholders it uses. */
  function statusPath({ attribute = 'status', name = '#status', within }: PlaceholderOptions): { path: string; names: Record<string, string> } {
    for (const n of [name, ...(within ? [within.name] : [])]) if (!n.startsWith('#')) throw new RangeError(`Name placeholder ${n} must start with #`);
    if (within?.name === name) throw new RangeError(`Name placeholder ${name} is used for the map and the status`);
    return within
      ? { path: `${within.name}.${name}`, names: { [within.name]: within.attribute, [name]: attribute } }
      : { path: name, names: { [name]: attribute } };
  }

  function statusIn(list: readonly S[], placeholders: PlaceholderOptions = {}): ConditionFragment {
    const { valuePrefix = ':s' } = placeholders;
    if (list.length === 0) throw new RangeError('A status condition needs at least one status');
    if (list.length > MAX_IN_OPERANDS) throw new RangeError(`A status condition takes at most ${MAX_IN_OPERANDS} statuses`);
    const { path, names } = statusPath(placeholders);
    if (!valuePrefix.startsWith(':')) throw new RangeError(`Value placeholder prefix ${valuePrefix} must start with :`);
    const values: Record<string, string> = {};
    list.forEach((s, i) => {
      assertStatus(s, 'Status');
      values[`${valuePrefix}${i}`] = s;
    });
    return { expression: `${path} IN (${Object.keys(values).join(', ')})`, names, values };
  }

  return Object.freeze({
    statuses: Object.freeze([...statuses]),
    terminal: Object.freeze(statuses.filter((s) => targets.get(s)!.length === 0)),
    initial: Object.freeze(statuses.filter((s) => sources.get(s)!.length === 0)),
    is,
    isTerminal: (s: S) => targets.get(s)?.length === 0,
    canMove: (from: S, to: S) => targets.get(from)?.includes(to) ?? false,
    targetsOf: (from: S) => targets.get(from) ?? [],
    sourcesOf: (to: S) => sources.get(to) ?? [],
    statusIn,
    transition(to: S, options: PlaceholderOptions & { from?: S | readonly S[] } = {}): TransitionFragment {
      assertStatus(to, 'Target status');
      const { from, ...placeholders } = options;
      const starts = from === undefined ? sources.get(to)! : typeof from === 'string' ? [from as S] : (from as readonly S[]);
      if (starts.length === 0) throw new RangeError(`No status moves to ${to}`);
      for (const s of starts) {
        assertStatus(s, 'Source status');
        if (!targets.get(s)!.includes(to)) throw new RangeError(`Status ${s} cannot move to ${to}`);
      }
      const cond = statusIn(starts, placeholders);
      const target = `${placeholders.valuePrefix ?? ':s'}To`;
      return { condition: cond.expression, set: `${statusPath(placeholders).path} = ${target}`, names: cond.names, values: { ...cond.values, [target]: to } };
    },
  });
}
