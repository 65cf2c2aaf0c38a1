/**
 * The TLS channel credentials a `Client` makes from its `ca`/`cert`/`key`
 * options: grpc-js's own (`credentials.createSsl`), but for the name sent
 * as SNI.
 *
 * grpc-js sets the TLS `servername` to the target's host whatever it is,
 * and Node prints a DeprecationWarning (DEP0123, "Setting the TLS
 * ServerName to an IP address is not permitted by RFC 6066") the first
 * time it is an IP address, as with the usual `127.0.0.1:50051`. grpc-js
 * has no option to leave it out (`grpc.ssl_target_name_override` only
 * replaces it, and changes the name the certificate is checked against).
 * So these credentials make the TLS connection themselves, as grpc-js
 * does (`ChannelCredentials._createSecureConnector`, its extension point
 * for credentials), with one difference: an IP address is never sent as
 * the server name. The certificate is still checked against the host the
 * client dialled (or `serverName`), an IP address against the
 * certificate's IP addresses, exactly as before.
 */
import { readFileSync } from "node:fs";
import { isIP, type Socket } from "node:net";
import { checkServerIdentity, connect, createSecureContext, type PeerCertificate, type SecureContext } from "node:tls";
import { CallCredentials, type ChannelOptions, ChannelCredentials, experimental } from "@grpc/grpc-js";

/** The file grpc-js reads its default roots from, when set (only for a TLS target without `ca`). */
const DEFAULT_ROOTS_ENV = "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH";

/**
 * The host a connection to `target` is for: what its certificate must
 * name. As grpc-js's: the target's host (without port or brackets),
 * "localhost" for a unix socket, and behind an HTTP CONNECT proxy the
 * host of the target the proxy is asked for.
 */
export function targetHost(target: experimental.GrpcUri, options: ChannelOptions): string {
  let path = target.path;
  const proxied = options["grpc.http_connect_target"];
  if (typeof proxied === "string") {
    path = proxied.replace(/^(dns|ipv4|ipv6):(\/\/[^/]*\/)?/, "");
  } else if (target.scheme === "unix" || target.scheme === "unix-abstract") {
    return "localhost";
  }
  // An ipv4:/ipv6: target may list several addresses: grpc-js checks the first.
  path = path.split(",")[0];
  return experimental.splitHostPort(path)?.host ?? path;
}

/**
 * TLS channel credentials (see the module docs): the CA to trust (the
 * system's when none is given), an optional client certificate, and an
 * optional name to check the server's certificate against instead of the
 * target's host.
 */
export class TlsCredentials extends ChannelCredentials {
  private readonly context: SecureContext;

  constructor(
    ca: Buffer | undefined,
    key: Buffer | undefined,
    cert: Buffer | undefined,
    /** The name the certificate must carry; default: the target's host. */
    private readonly serverName: string | undefined,
  ) {
    super();
    const roots = ca ?? (process.env[DEFAULT_ROOTS_ENV] ? readFileSync(process.env[DEFAULT_ROOTS_ENV]!) : undefined);
    // Throws here, at the Client's construction, for a PEM that does not parse (as createSsl does).
    this.context = createSecureContext({ ca: roots, key, cert });
  }

  _isSecure(): boolean {
    return true;
  }

  _equals(other: ChannelCredentials): boolean {
    return other === this;
  }

  _createSecureConnector(
    channelTarget: experimental.GrpcUri,
    options: ChannelOptions,
    callCredentials?: CallCredentials,
  ): experimental.SecureConnector {
    const host = this.serverName || targetHost(channelTarget, options);
    const context = this.context;
    const calls = callCredentials ?? CallCredentials.createEmpty();
    return {
      connect(socket: Socket): Promise<experimental.SecureConnectResult> {
        return new Promise((resolve, reject) => {
          const tlsSocket = connect(
            {
              socket,
              secureContext: context,
              ALPNProtocols: ["h2"],
              // SNI carries a host name only (RFC 6066): none for an IP address.
              servername: isIP(host) ? undefined : host,
              // The check is against `host`, an IP address included, whatever SNI said.
              checkServerIdentity: (_sent: string, cert: PeerCertificate) => checkServerIdentity(host, cert),
            },
            () => {
              if (!tlsSocket.authorized) {
                reject(tlsSocket.authorizationError);
                return;
              }
              resolve({ socket: tlsSocket, secure: true });
            },
          );
          tlsSocket.on("error", reject);
        });
      },
      waitForReady: () => Promise.resolve(),
      getCallCredentials: () => calls,
      destroy: () => {},
    };
  }
}
