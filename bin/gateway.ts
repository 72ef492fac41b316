import { parseArgs } from 'node:util';
import { COMMANDS, UsageError } from './cli/commands.ts';
import { targetEnvironment } from './cli/target.ts';

/**
 * Operator CLI: `npm run gateway -- <command> [flags] [--json] [--stack NAME [--region R]]`.
 * Talks to the running local runtime's store, or to a deployed stack's tables with --stack.
 * Errors are one line on stderr and a non-zero exit: 2 for a wrong invocation, 1 for a refused operation.
 */
function help(): string {
  return ['Usage: npm run gateway -- <command> [flags] [--json] [--stack NAME] [--region R] [--data-dir DIR]', '', 'Commands:', ...Object.values(COMMANDS).map((c) => `  ${c.usage}`)].join('\n');
}

export async function main(argv: string[]): Promise<number> {
  const json = argv.includes('--json');
  const fail = (code: number, message: string) => {
    if (json) process.stderr.write(`${JSON.stringify({ error: message })}\n`);
    else process.stderr.write(`error: ${message}\n`);
    return code;
  };
  if (argv.length === 0 || argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(`${help()}\n`);
    return argv.length === 0 ? 2 : 0;
  }
  let flags: Record<string, string | undefined>;
  let positionals: string[];
  try {
    // Flags may stand before or after the command words: `--stack X developer create …` and `developer create … --stack X`.
    const parsed = parseArgs({ args: argv, options: flagOptions(), strict: true, allowPositionals: true });
    positionals = parsed.positionals;
    flags = Object.fromEntries(Object.entries(parsed.values).filter(([, v]) => typeof v === 'string')) as Record<string, string>;
  } catch (err) {
    return fail(2, (err as Error).message.split('\n')[0]!);
  }
  const name = positionals.join(' ');
  const command = COMMANDS[name];
  if (!command) return fail(2, `unknown command "${name}"; run with --help for the list`);
  try {
    Object.assign(process.env, await targetEnvironment({ stack: flags.stack, region: flags.region, dataDir: flags['data-dir'] }));
    delete flags.stack;
    delete flags.region;
    delete flags['data-dir'];
    const out = await command.run(flags);
    process.stdout.write(`${json ? JSON.stringify(out.data) : out.text}\n`);
    return 0;
  } catch (err) {
    if (err instanceof UsageError) return fail(2, err.message);
    const e = err as Error & { code?: string };
    if (e.name === 'RegistryError') return fail(1, e.message);
    if (e.code === 'ECONNREFUSED' || /ECONNREFUSED/.test(String(e.message))) return fail(1, 'the local gateway is not answering: is "npm start" running?');
    return fail(1, e.message.split('\n')[0] ?? 'failed');
  }
}

/** Every flag any command takes, as strings; each command validates its own. */
function flagOptions() {
  const names = new Set<string>(['json', 'stack', 'region', 'data-dir']);
  for (const c of Object.values(COMMANDS)) for (const m of c.usage.matchAll(/--([a-z-]+)/g)) names.add(m[1]!);
  return Object.fromEntries([...names].map((n) => [n, { type: n === 'json' ? ('boolean' as const) : ('string' as const) }]));
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err: unknown) => {
      process.stderr.write(`error: ${(err as Error).message}\n`);
      process.exit(1);
    },
  );
}
