/**
 * The operator CLI's own argument reader. It replaces node:util parseArgs because parseArgs cannot tell `-5` (a
 * value) from `-5` (a short option), and its messages talk about positionals and quoting, which an operator typing
 * `gateway developer create --plan-seconds -5` should never have to decode. Every message here names the command and
 * the flag the operator typed.
 */

/** Flags every command accepts: output format and where the store is. */
export const GLOBAL_FLAGS = ['json', 'stack', 'region', 'data-dir'] as const;

/** Flags that take no value; every other `--name` takes the next argument (or `--name=value`). */
const BOOLEAN_FLAGS = new Set(['json', 'any']);

export interface ReadArgs {
  /** Command words in order (`developer`, `create`). */
  words: string[];
  /** Flags in order. `value` is true for a boolean flag, undefined when a value-taking flag had none. */
  flags: { name: string; value: string | true | undefined; typed: string; problem?: string }[];
  help: boolean;
}

export function readArgs(argv: string[]): ReadArgs {
  const words: string[] = [];
  const flags: ReadArgs['flags'] = [];
  let help = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--help' || arg === '-h') {
      help = true;
    } else if (arg === '--') {
      // Conventional end of flags: what follows is taken as command words, never as flags.
      words.push(...argv.slice(i + 1));
      break;
    } else if (arg.startsWith('--') && arg.length > 2) {
      const eq = arg.indexOf('=');
      const name = eq > 0 ? arg.slice(2, eq) : arg.slice(2);
      if (eq > 0) {
        if (BOOLEAN_FLAGS.has(name)) flags.push({ name, value: true, typed: `--${name}`, problem: `--${name} takes no value` });
        else flags.push({ name, value: arg.slice(eq + 1), typed: `--${name}` });
      } else if (BOOLEAN_FLAGS.has(name)) {
        flags.push({ name, value: true, typed: arg });
      } else {
        // The next argument is this flag's value unless it is itself a flag. A single dash does not make a flag:
        // `--plan-seconds -5` is a negative number for the command to refuse with its own message.
        const next = argv[i + 1];
        const isValue = next !== undefined && !next.startsWith('--') && next !== '-h';
        flags.push({ name, value: isValue ? next : undefined, typed: arg, ...(isValue ? {} : { problem: `${arg} needs a value` }) });
        if (isValue) i++;
      }
    } else if (arg.startsWith('-') && arg.length > 1) {
      // Single-dash flags (other than -h) are not used by any command.
      flags.push({ name: arg, value: undefined, typed: arg });
    } else {
      words.push(arg);
    }
  }
  return { words, flags, help };
}

/** The `--name`s a usage line mentions, e.g. `developer create --id ID [--pool-seconds N]` → id, pool-seconds. */
export function flagsOfUsage(usage: string): string[] {
  return [...usage.matchAll(/--([a-z][a-z0-9-]*)/g)].map((m) => m[1]!);
}
