import { Validations } from 'aws-cdk-lib';
import * as kms from 'aws-cdk-lib/aws-kms';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { Construct } from 'constructs';
import { removalPolicyFor } from './lifecycle.ts';

export interface GatewaySecretsProps {
  readonly stage: string;
  readonly production: boolean;
}

/**
 * The two secrets the gateway holds:
 * - a KMS key (yearly rotation) that encrypts projects' provider keys. The operator CLI encrypts with it from
 *   outside AWS. In AWS the functions that call providers may only Decrypt with it (`providers` in the manifest),
 *   the functions that store webhook callback secrets with the same cipher may only Encrypt (`encrypts`), and the
 *   webhook sender, which reads them, may only Decrypt (`decrypts`).
 * - the Secrets Manager secret with the service's own Anthropic key. It is created without a value; the operator
 *   puts the key into it once (docs/deploy.md), and replaces it to rotate.
 */
export class GatewaySecrets extends Construct {
  readonly providerKeysKey: kms.Key;
  readonly anthropicKey: secretsmanager.Secret;

  constructor(scope: Construct, id: string, props: GatewaySecretsProps) {
    super(scope, id);
    const removalPolicy = removalPolicyFor(props.production);

    this.providerKeysKey = new kms.Key(this, 'ProviderKeysKey', {
      description: `Prompt gateway (${props.stage}): encrypts projects' provider API keys`,
      alias: `alias/prompt-gateway-${props.stage}-provider-keys`,
      enableKeyRotation: true,
      removalPolicy,
    });

    this.anthropicKey = new secretsmanager.Secret(this, 'AnthropicApiKey', {
      description: `Prompt gateway (${props.stage}): the service's Anthropic API key (set it with aws secretsmanager put-secret-value)`,
      removalPolicy,
    });
    // Created empty: no generated random string that would look like a key. The operator sets the real value.
    (this.anthropicKey.node.defaultChild as secretsmanager.CfnSecret).addPropertyDeletionOverride('GenerateSecretString');
    Validations.of(this.anthropicKey).acknowledge({
      id: 'AwsSolutions-SMG4',
      reason:
        'The secret holds an Anthropic API key, which only the Anthropic console can issue: there is no rotation Lambda ' +
        'that could mint a new one. Operators rotate it by hand (docs/deploy.md, "Rotating secrets").',
    });
  }

  /**
   * Lets `fn` encrypt with the provider-keys key — `kms:Encrypt` and nothing else: no Decrypt, no ReEncrypt or data
   * keys, which CDK's grantEncrypt would add — and tells it the key (PROVIDER_KEYS_KMS_KEY_ID), so keyCipher()
   * (lambdas/registry/key-cipher.ts) uses KMS.
   */
  grantEncrypt(fn: lambda.Function): void {
    this.providerKeysKey.grant(fn, 'kms:Encrypt');
    fn.addEnvironment('PROVIDER_KEYS_KMS_KEY_ID', this.providerKeysKey.keyArn);
  }

  /** Lets `fn` decrypt with the provider-keys key (`kms:Decrypt` only) and tells it the key, as grantEncrypt does. */
  grantDecryptOnly(fn: lambda.Function): void {
    this.providerKeysKey.grantDecrypt(fn);
    fn.addEnvironment('PROVIDER_KEYS_KMS_KEY_ID', this.providerKeysKey.keyArn);
  }
}
