import type { APIGatewayProxyEvent, APIGatewayProxyResult } from 'aws-lambda';
import { conjureApp } from '../conjure/app.ts';
import { apiGatewayResultFrom, requestFromApiGateway } from '../http/api-gateway.ts';
import { gatewayFunction } from './middleware.ts';

const app = conjureApp();

/** API Gateway REST → the conjure core → API Gateway result. Nothing is decided here. */
export const handler = gatewayFunction<APIGatewayProxyEvent, APIGatewayProxyResult>(async (event) =>
  apiGatewayResultFrom(await app.fetch(() => requestFromApiGateway(event))),
);
