import { ScanCommand } from '@aws-sdk/lib-dynamodb';
import { env } from '../config/env.ts';
import { documentClient } from '../store/dynamo.ts';
import { Project } from './model.ts';

/**
 * The operator's listings of the registry (the CLI, the console). Apart from registry.ts because no function runs
 * them: a Lambda bundle that never imports this module carries no Scan, and its role needs none.
 */

const table = () => env().REGISTRY_TABLE;

/**
 * Every project, or a developer's, in id order. The registry holds one item per developer and project (and the
 * deployment's prices): an operator's listing scans it, in pages, reading only the projects — the table is small by
 * nature (thousands of items, never per request or per user), so no index is kept for a command run by hand.
 */
export async function listProjects(filter: { developerId?: string } = {}): Promise<Project[]> {
  const projects: Project[] = [];
  let start: Record<string, unknown> | undefined;
  do {
    const out = await documentClient().send(
      new ScanCommand({
        TableName: table(),
        FilterExpression: filter.developerId ? 'kind = :k AND developerId = :d' : 'kind = :k',
        ExpressionAttributeValues: { ':k': 'project', ...(filter.developerId ? { ':d': filter.developerId } : {}) },
        ExclusiveStartKey: start,
        ConsistentRead: true,
      }),
    );
    for (const item of out.Items ?? []) projects.push(Project.parse(item));
    start = out.LastEvaluatedKey;
  } while (start);
  return projects.sort((a, b) => a.projectId.localeCompare(b.projectId));
}
