import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { DecryptCommand, EncryptCommand, KMSClient } from '@aws-sdk/client-kms';
import { env } from '../config/env.ts';
import { instanceValue } from '../instance/state.ts';

/**
 * Encrypts projects' provider keys at rest. In AWS the key never leaves KMS; locally an AES-256-GCM key in a file
 * under the data directory stands in for it. Ciphertexts carry a prefix naming the scheme that made them.
 */
export interface KeyCipher {
  encrypt(plaintext: string, context: { projectId: string }): Promise<string>;
  decrypt(ciphertext: string, context: { projectId: string }): Promise<string>;
}

export class KmsKeyCipher implements KeyCipher {
  private readonly kms: KMSClient;
  constructor(
    private readonly keyId: string,
    region: string,
  ) {
    this.kms = new KMSClient({ region });
  }

  async encrypt(plaintext: string, { projectId }: { projectId: string }): Promise<string> {
    const out = await this.kms.send(
      new EncryptCommand({
        KeyId: this.keyId,
        Plaintext: Buffer.from(plaintext, 'utf8'),
        // Binds the ciphertext to its project: it cannot be copied onto another project's record.
        EncryptionContext: { projectId },
      }),
    );
    return `kms:${Buffer.from(out.CiphertextBlob!).toString('base64')}`;
  }

  async decrypt(ciphertext: string, { projectId }: { projectId: string }): Promise<string> {
    if (!ciphertext.startsWith('kms:')) throw new Error('Provider key was not encrypted with KMS');
    const out = await this.kms.send(new DecryptCommand({ CiphertextBlob: Buffer.from(ciphertext.slice(4), 'base64'), EncryptionContext: { projectId } }));
    return Buffer.from(out.Plaintext!).toString('utf8');
  }
}

export class LocalKeyCipher implements KeyCipher {
  private key: Buffer | undefined;
  constructor(private readonly keyFile: string) {}

  private loadKey(): Buffer {
    if (!this.key) {
      if (!existsSync(this.keyFile)) {
        mkdirSync(dirname(this.keyFile), { recursive: true });
        writeFileSync(this.keyFile, randomBytes(32).toString('base64'), { mode: 0o600, flag: 'wx' });
      }
      this.key = Buffer.from(readFileSync(this.keyFile, 'utf8').trim(), 'base64');
      if (this.key.length !== 32) throw new Error(`Local key file ${this.keyFile} does not hold a 32-byte key`);
    }
    return this.key;
  }

  async encrypt(plaintext: string, { projectId }: { projectId: string }): Promise<string> {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.loadKey(), iv);
    cipher.setAAD(Buffer.from(projectId, 'utf8'));
    const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
    return `local:${Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64')}`;
  }

  async decrypt(ciphertext: string, { projectId }: { projectId: string }): Promise<string> {
    if (!ciphertext.startsWith('local:')) throw new Error('Provider key was not encrypted with the local key');
    const raw = Buffer.from(ciphertext.slice(6), 'base64');
    const decipher = createDecipheriv('aes-256-gcm', this.loadKey(), raw.subarray(0, 12));
    decipher.setAAD(Buffer.from(projectId, 'utf8'));
    decipher.setAuthTag(raw.subarray(12, 28));
    return Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString('utf8');
  }
}

/** The cipher this instance is configured for: KMS when a key id is set, else the local key file. */
export const keyCipher = instanceValue((): KeyCipher => {
  const { PROVIDER_KEYS_KMS_KEY_ID, PROVIDER_KEYS_LOCAL_KEY_FILE, AWS_REGION } = env();
  if (PROVIDER_KEYS_KMS_KEY_ID) return new KmsKeyCipher(PROVIDER_KEYS_KMS_KEY_ID, AWS_REGION);
  if (PROVIDER_KEYS_LOCAL_KEY_FILE) return new LocalKeyCipher(PROVIDER_KEYS_LOCAL_KEY_FILE);
  throw new Error('No provider-key cipher configured: set PROVIDER_KEYS_KMS_KEY_ID or PROVIDER_KEYS_LOCAL_KEY_FILE');
});
