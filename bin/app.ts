import { App } from 'aws-cdk-lib';
import { buildGatewayApp } from '../lib/app.ts';

// The CDK app (cdk.json runs it with tsx). Options come from context: see lib/app.ts and docs/deploy.md.
const app = new App();
buildGatewayApp(app);
app.synth();
