import { providerKeyFor } from '../registry/registry.ts';
import type { ProjectKeyProviderId } from '../routing/provider-ids.ts';
import type { Provider } from './types.ts';

/**
 * The credential of a provider each project pays with its own key (set with "gateway project set-provider-key"):
 * the project's key, decrypted, or undefined when it has none. Returned together with `usesProjectKey` so that a
 * provider cannot claim one without using the other.
 */
export function projectKeyCredential(id: ProjectKeyProviderId): Pick<Provider, 'usesProjectKey' | 'credential'> {
  return { usesProjectKey: true, credential: (project) => providerKeyFor(project, id) };
}
