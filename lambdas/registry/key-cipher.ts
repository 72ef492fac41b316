import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { DecryptCommand, EncryptCommand, KMSClient } from '@aws-sdk/client-kms';
import { env } from '../config/env.ts';
import { instanceValue } from '../instance/state.ts';

/**
 * Encrypts projects' provider keys at rest, and the webhook secrets (vessel callbacks, budget alerts). In AWS the key
 * never leaves KMS; locally an AES-256-GCM key in a file under the data directory stands in for it. Ciphertexts carry
 * a prefix naming the scheme that made them.
 */
export interface KeyCipher {
  encrypt(plaintext: string, context: CipherOwner): Promise<string>;
  decrypt(ciphertext: string, context: CipherOwner): Promise<string>;
}

/**
 * Whose secret a ciphertext is: a project's (provider keys, callback and alert secrets), or a developer's (their plan
 * alerts' secret). The ciphertext is bound to it and cannot be copied onto another owner's record.
 */
export type CipherOwner = { projectId: string } | { developerId: string };

/** The owner as KMS's encryption context. */
const encryptionContext = (owner: CipherOwner): Record<string, string> =>
  'projectId' in owner ? { projectId: owner.projectId } : { developerId: owner.developerId };

/** The owner as the local cipher's associated data: a project's id as it always was; ids hold no '#', so no clash. */
const associatedData = (owner: CipherOwner): Buffer => Buffer.from('projectId' in owner ? owner.projectId : `developer#${owner.developerId}`, 'utf8');

export class KmsKeyCipher implements KeyCipher {
  private readonly kms: KMSClient;
  constructor(
    private readonly keyId: string,
    region: string,
  ) {
    this.kms = new KMSClient({ region });
  }

  async encrypt(plaintext: string, owner: CipherOwner): Promise<string> {
    const out = await this.kms.send(
      new EncryptCommand({
        KeyId: this.keyId,
        Plaintext: Buffer.from(plaintext, 'utf8'),
        // Binds the ciphertext to its owner: it cannot be copied onto another project's (or developer's) record.
        EncryptionContext: encryptionContext(owner),
      }),
    );
    return `kms:${Buffer.from(out.CiphertextBlob!).toString('base64')}`;
  }

  async decrypt(ciphertext: string, owner: CipherOwner): Promise<string> {
    if (!ciphertext.startsWith('kms:')) throw new Error('Provider key was not encrypted with KMS');
    const out = await this.kms.send(
      new DecryptCommand({ CiphertextBlob: Buffer.from(ciphertext.slice(4), 'base64'), EncryptionContext: encryptionContext(owner) }),
    );
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

  async encrypt(plaintext: string, owner: CipherOwner): Promise<string> {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.loadKey(), iv);
    cipher.setAAD(associatedData(owner));
    const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
    return `local:${Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64')}`;
  }

  async decrypt(ciphertext: string, owner: CipherOwner): Promise<string> {
    if (!ciphertext.startsWith('local:')) throw new Error('Provider key was not encrypted with the local key');
    const raw = Buffer.from(ciphertext.slice(6), 'base64');
    const decipher = createDecipheriv('aes-256-gcm', this.loadKey(), raw.subarray(0, 12));
    decipher.setAAD(associatedData(owner));
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
