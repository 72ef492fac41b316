import { flagsOfUsage, GLOBAL_FLAGS, readArgs } from './cli/args.ts';
import { COMMANDS, UsageError, type Command } from './cli/commands.ts';
import { resetInstanceState } from '../lambdas/instance/state.ts';
import { resolveTarget, type Target } from './cli/target.ts';

/**
 * Operator CLI: `npm run gateway -- <group> <command> [flags] [--json] [--stack NAME [--region R]]`.
 * Talks to the running local runtime's store, or to a deployed stack's tables with --stack.
 * Errors are one line on stderr and a non-zero exit: 2 for a wrong invocation, 1 for a refused operation.
 */

/**
 * Commands by group: `developer` → { create, show }. Derived from COMMANDS so the two never disagree. A command of
 * one word (`activity`, `console`) is its group's only command, under the empty name.
 */
const GROUPS = new Map<string, Map<string, Command>>();
for (const [name, command] of Object.entries(COMMANDS)) {
  const [group, sub = ''] = name.split(' ') as [string, string?];
  if (!GROUPS.has(group)) GROUPS.set(group, new Map());
  GROUPS.get(group)!.set(sub, command);
}

const GLOBAL_HELP = [
  'Flags for every command:',
  '  --json           machine-readable output on stdout; errors as {"error": …} on stderr',
  '  --stack NAME     work on a deployed stack (tables and KMS key from its CloudFormation outputs)',
  "  --region R       the stack's region (default: AWS_REGION)",
  "  --data-dir DIR   the local gateway's DATA_DIR (default: $DATA_DIR, else .data)",
  '',
  'Exit codes: 0 done, 1 refused (e.g. unknown project), 2 wrong invocation.',
];

function commandLines(commands: Iterable<Command>): string[] {
  return [...commands].flatMap((c) => [`  ${c.usage}`, `      ${c.summary}`]);
}

function help(): string {
  return [
    'Usage: gateway <group> <command> [flags] [--json] [--stack NAME [--region R]] [--data-dir DIR]',
    '       (in this repository: npm run gateway -- <group> <command> …)',
    '',
    'Commands:',
    ...commandLines(Object.values(COMMANDS)),
    '',
    ...GLOBAL_HELP,
    '',
    `gateway <group> --help lists one group's commands: ${[...GROUPS.keys()].join(', ')}.`,
  ].join('\n');
}

function groupHelp(group: string): string {
  return [`Usage: gateway ${group} <command> [flags]`, '', 'Commands:', ...commandLines(GROUPS.get(group)!.values()), '', ...GLOBAL_HELP].join('\n');
}

function commandHelp(command: Command): string {
  return [`Usage: gateway ${command.usage}`, '', `  ${command.summary}`, '', ...GLOBAL_HELP].join('\n');
}

export interface Dependencies {
  /** Where the store is; tests stand in for a deployed stack with it. */
  resolveTarget(opts: { stack?: string; region?: string; dataDir?: string }): Promise<Target>;
}

export async function main(argv: string[], deps: Dependencies = { resolveTarget }): Promise<number> {
  const args = readArgs(argv);
  const json = args.flags.some((f) => f.name === 'json');
  const fail = (code: number, message: string) => {
    if (json) process.stderr.write(`${JSON.stringify({ error: message })}\n`);
    else process.stderr.write(`error: ${message}\n`);
    return code;
  };
  const print = (text: string, code: number) => {
    process.stdout.write(`${text}\n`);
    return code;
  };

  if (argv.length === 0) return print(help(), 2);
  // `gateway help [group [command]]` reads like `gateway [group [command]] --help`.
  const words = args.words[0] === 'help' ? args.words.slice(1) : args.words;
  const wantsHelp = args.help || args.words[0] === 'help';

  const [groupName, ...rest] = words;
  if (groupName === undefined) return wantsHelp ? print(help(), 0) : fail(2, 'missing command; run gateway --help for the list');
  const group = GROUPS.get(groupName);
  if (!group) return fail(2, `unknown command "${words.join(' ')}"; run gateway --help for the list`);
  const single = group.has('');
  const [subName, ...extra] = single ? ['', ...rest] : rest;
  const subs = [...group.keys()].join(', ');
  if (subName === undefined) return wantsHelp ? print(groupHelp(groupName), 0) : fail(2, `missing subcommand for ${groupName}: one of ${subs}`);
  const command = group.get(subName);
  const name = single ? groupName : `${groupName} ${subName}`;
  if (!command) return fail(2, `unknown subcommand "${subName}" for ${groupName}: one of ${subs}`);
  if (wantsHelp) return print(commandHelp(command), 0);
  if (extra.length) return fail(2, `unexpected argument "${extra[0]}" for ${name}; flags start with -- (run gateway ${groupName} --help)`);

  const allowed = new Set<string>([...GLOBAL_FLAGS, ...flagsOfUsage(command.usage)]);
  const flags: Record<string, string | undefined> = {};
  for (const f of args.flags) {
    if (!allowed.has(f.name)) return fail(2, `unknown flag ${f.typed} for ${name}; run gateway ${groupName} --help`);
    if (f.problem) return fail(2, f.problem);
    if (f.name === 'json') continue;
    if (f.name in flags) return fail(2, `--${f.name} is given more than once`);
    flags[f.name] = f.value as string;
  }

  const where = { stack: flags.stack, region: flags.region, dataDir: flags['data-dir'] };
  delete flags.stack;
  delete flags.region;
  delete flags['data-dir'];
  let target: Promise<Target> | undefined;
  // The registry reads its tables and endpoint from the environment at first use, so the target's environment is
  // in place before any command touches the store.
  const connect = () =>
    (target ??= deps.resolveTarget(where).then((t) => {
      const changed = Object.entries(t.env).some(([name, value]) => process.env[name] !== value);
      Object.assign(process.env, t.env);
      // Clients and the parsed environment are per instance: built again from the target's. Only when the target
      // changed the environment: a run whose target is the environment already in place (the CLI inside a running
      // gateway's process, as the tests run it) must not destroy the clients that gateway's requests are using —
      // a webhook attempt in flight then failed and waited out its message's visibility timeout.
      if (changed) resetInstanceState();
      return t;
    }));
  try {
    const out = await command.run(flags, { connect });
    process.stdout.write(`${json ? JSON.stringify(out.data) : out.text}\n`);
    await out.serving;
    return 0;
  } catch (err) {
    if (err instanceof UsageError) return fail(2, err.message);
    const e = err as Error & { code?: string };
    if (e.name === 'RegistryError') return fail(1, e.message);
    if (e.code === 'ECONNREFUSED' || /ECONNREFUSED/.test(String(e.message))) return fail(1, 'the local gateway is not answering: is "npm start" running?');
    return fail(1, e.message.split('\n')[0] ?? 'failed');
  }
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
