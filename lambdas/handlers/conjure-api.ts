import middy from '@middy/core';
import type { APIGatewayProxyEvent, APIGatewayProxyResult } from 'aws-lambda';
import { conjureApp } from '../conjure/app.ts';
import { apiGatewayResultFrom, requestFromApiGateway } from '../http/api-gateway.ts';
import { observability } from './middleware.ts';

const app = conjureApp();

/** API Gateway REST → the conjure core → API Gateway result. Nothing is decided here. */
export const handler = middy<APIGatewayProxyEvent, APIGatewayProxyResult>()
  .use(observability())
  .handler(async (event) => apiGatewayResultFrom(await app.fetch(() => requestFromApiGateway(event))));
