#!/usr/bin/env bash
# Test certificates and a policy for the client tests, made offline with
# the openssl CLI: clients/tools/pki.sh DIR writes into DIR
#
#   ca.pem                        a CA (its key: ca-key.pem)
#   server.pem, server-key.pem    the server, for 127.0.0.1 and localhost
#   alice.pem, alice-key.pem      a client certificate for alice.clients.test
#   bob.pem, bob-key.pem          a client certificate for bob.clients.test
#   alice.token, bob.token        bearer secrets
#   policy.toml                   alice: lease, write, read on every job;
#                                 bob: read on jobs "bob/..." only
#
# For tests only: the keys are not protected and the secrets are fixed.
set -euo pipefail
dir=${1:?usage: pki.sh DIR}
mkdir -p "$dir"
cd "$dir"

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

key ca-key.pem
openssl req -x509 -new -key ca-key.pem -sha256 -days 30 -subj "/CN=leasehold test CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -out ca.pem 2>/dev/null

# issue NAME CN SAN USAGE
issue() {
  key "$1-key.pem"
  openssl req -new -key "$1-key.pem" -subj "/CN=$2" -out "$1.csr" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nsubjectAltName=%s\nextendedKeyUsage=%s\n' \
    "$3" "$4" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 30 -sha256 \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
issue server localhost "DNS:localhost,IP:127.0.0.1" serverAuth
issue alice alice.clients.test "DNS:alice.clients.test" clientAuth
issue bob bob.clients.test "DNS:bob.clients.test" clientAuth
rm -f ca.srl

printf %s "alice-secret-token" >alice.token
printf %s "bob-secret-token" >bob.token
sha() { printf %s "$(cat "$1")" | openssl dgst -sha256 -r | cut -d' ' -f1; }
cat >policy.toml <<TOML
[[principal]]
name = "alice"
cert_names = ["alice.clients.test"]
token_sha256 = ["$(sha alice.token)"]

[[principal]]
name = "bob"
cert_names = ["bob.clients.test"]
token_sha256 = ["$(sha bob.token)"]

[[grant]]
principal = "alice"
jobs = [""]
actions = ["lease", "write", "read"]

[[grant]]
principal = "bob"
jobs = ["bob/"]
actions = ["read"]
TOML
