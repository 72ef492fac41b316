import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { env } from '../../config/env.ts';
import { instanceValue } from '../../instance/state.ts';
import { PROVIDER_LABELS } from '../../routing/provider-ids.ts';

/**
 * The service's own Anthropic key: ANTHROPIC_API_KEY when set (local), else the Secrets Manager secret the stack
 * created. Read once per instance; a failed read is retried on the next request.
 */
export const anthropicApiKey = instanceValue(async (): Promise<string> => {
  const { ANTHROPIC_API_KEY, ANTHROPIC_API_KEY_SECRET_ARN, AWS_REGION } = env();
  if (ANTHROPIC_API_KEY) return ANTHROPIC_API_KEY;
  if (!ANTHROPIC_API_KEY_SECRET_ARN) throw new Error(`No ${PROVIDER_LABELS.anthropic} key configured: set ANTHROPIC_API_KEY or ANTHROPIC_API_KEY_SECRET_ARN`);
  const out = await new SecretsManagerClient({ region: AWS_REGION }).send(new GetSecretValueCommand({ SecretId: ANTHROPIC_API_KEY_SECRET_ARN }));
  const key = out.SecretString?.trim();
  if (!key) throw new Error(`The ${PROVIDER_LABELS.anthropic} key secret is empty: put the key into it (see docs/deploy.md)`);
  return key;
});
