#!/usr/bin/env bash
# Makes what `leasehold serve` needs for TLS and mutual TLS, with openssl:
# a CA, a server certificate, and one client certificate per principal.
#
#   deploy/certs.sh DIR --server NAME[,NAME...] [--client NAME]...
#
#   DIR/ca.pem, ca-key.pem          the CA (keep ca-key.pem offline)
#   DIR/server.pem, server-key.pem  for --tls-cert / --tls-key; NAMEs are the
#                                   DNS names and IP addresses clients dial
#   DIR/NAME.pem, NAME-key.pem      a client certificate per --client NAME
#                                   (its DNS name: what a policy's
#                                   cert_names matches)
#
# Run it again with the same DIR to add clients or renew the server
# certificate: an existing CA is kept. Keys are made readable by their
# owner only. Validity: CA 10 years, certificates 1 year (DAYS=N to
# change).
set -euo pipefail

usage() { echo "usage: $0 DIR --server NAME[,NAME...] [--client NAME]..." >&2; exit 2; }
[ $# -ge 1 ] || usage
dir=$1; shift
server=
clients=()
while [ $# -gt 0 ]; do
  case $1 in
    --server) server=${2:?--server needs NAME[,NAME...]}; shift 2 ;;
    --client) clients+=("${2:?--client needs a NAME}"); shift 2 ;;
    *) usage ;;
  esac
done
[ -n "$server" ] || [ ${#clients[@]} -gt 0 ] || usage
command -v openssl >/dev/null || { echo "$0: needs openssl (apt-get install openssl)" >&2; exit 1; }
days=${DAYS:-365}

mkdir -p "$dir"
cd "$dir"
umask 077

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

if [ ! -f ca.pem ]; then
  key ca-key.pem
  openssl req -x509 -new -key ca-key.pem -sha256 -days 3650 -subj "/CN=leasehold CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out ca.pem 2>/dev/null
  echo "made the CA: $dir/ca.pem"
fi

# issue FILE CN SANS USAGE
issue() {
  key "$1-key.pem"
  openssl req -new -key "$1-key.pem" -subj "/CN=$2" -out "$1.csr" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nsubjectAltName=%s\nextendedKeyUsage=%s\n' \
    "$3" "$4" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days "$days" \
    -sha256 -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
  chmod 644 "$1.pem"
  echo "made $dir/$1.pem ($3, $4)"
}

if [ -n "$server" ]; then
  sans=
  IFS=, read -ra names <<<"$server"
  for n in "${names[@]}"; do
    if [[ $n =~ ^[0-9.]+$ || $n == *:* ]]; then sans+="IP:$n,"; else sans+="DNS:$n,"; fi
  done
  issue server "${names[0]}" "${sans%,}" serverAuth
fi
for c in "${clients[@]}"; do
  [[ $c =~ ^[A-Za-z0-9.-]+$ ]] || { echo "$0: --client $c: use letters, digits, dots and dashes" >&2; exit 2; }
  issue "$c" "$c" "DNS:$c" clientAuth
done
chmod 644 ca.pem
