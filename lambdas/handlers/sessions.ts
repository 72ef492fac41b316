import type { APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import { webSocketEventFrom, type WebSocketLambdaEvent } from '../http/websocket.ts';
import { handleSocketEvent } from '../sessions/socket.ts';
import { gatewayFunction } from './middleware.ts';

/** The /ws WebSocket API's one function: $connect (the token), $default (frames), $disconnect (docs/ws.md). */
export const handler = gatewayFunction<WebSocketLambdaEvent, APIGatewayProxyStructuredResultV2>((event) => handleSocketEvent(webSocketEventFrom(event)));
