// Why a worker could not open its channel to the coordinator, in a sentence
// that names the cause and the flag that fixes it.
//
// gRPC reports a failed TLS handshake only as a channel that never becomes
// ready, and its last error is often just "Socket closed" (the coordinator
// hung up: a missing or untrusted client certificate, or plain text sent to
// a TLS port). So the worker dials the coordinator once more itself, with
// OpenSSL and its own TLS files, and looks at what happens:
//
//   * no TCP connection at all (nothing listens, unknown host): "" (the
//     caller says the coordinator did not answer, as before);
//   * the worker speaks TLS and the coordinator's certificate does not verify
//     against --tls-ca (or the system's roots), or does not carry the name
//     dialled (--coordinator's host, or --tls-server-name);
//   * the coordinator refuses the worker's client certificate (a TLS alert:
//     certificate required, unknown ca, bad certificate) after the handshake;
//   * the worker speaks TLS to a plain-text port, or plain text to a TLS port.
//
// The probe connects once, with a 2 s limit on each step, and sends nothing
// beyond the TLS handshake.
#pragma once

#include <string>

namespace tpserve {

struct DialSettings {
  std::string address;      // --coordinator: HOST:PORT, [IPv6]:PORT (unix:PATH is not probed)
  bool tls = false;         // the worker dials with TLS
  std::string ca;           // --tls-ca ("" with TLS: the system's roots)
  std::string cert;         // --tls-cert, with --tls-key
  std::string key;
  std::string server_name;  // --tls-server-name ("" = the host of `address`)
};

// The cause of a failed dial, or "" when the coordinator cannot be reached
// at all. `grpc_error` is the channel's last error (the status message of a
// call that failed fast), quoted when the probe finds nothing wrong with TLS.
std::string DiagnoseDialFailure(const DialSettings& dial, const std::string& grpc_error);

}  // namespace tpserve
