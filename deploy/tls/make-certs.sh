#!/usr/bin/env bash
# A private certificate authority and one certificate for the scheduler, the workers and
# the clients of a cluster, for dask's TLS (deploy/README.md, "On an untrusted network").
#
#   deploy/tls/make-certs.sh OUT_DIR [HOSTNAME_OR_IP ...]
#
# OUT_DIR receives ca.pem (give it to every node and client), ca-key.pem (keep it off the
# cluster: it signs new certificates), node.pem and node-key.pem (the certificate and its
# key, readable only by the user running dask). The certificate names localhost,
# 127.0.0.1, this host's name and addresses, and any extra names given; every process
# presents it and checks its peer's against ca.pem (mutual TLS). For a real deployment
# give each host its own key and certificate signed by the same CA.
#
# Keys never belong in a repository: the script refuses an OUT_DIR inside a git work tree
# unless git ignores it (this repository's .gitignore ignores certs/).
set -euo pipefail
OUT=${1:?usage: make-certs.sh OUT_DIR [HOSTNAME_OR_IP ...]}
shift
DAYS=${DAYS:-365}

# the nearest existing folder of OUT tells whether it lies in a git work tree
probe=$OUT
while [ ! -d "$probe" ]; do probe=$(dirname "$probe"); done
if top=$(git -C "$probe" rev-parse --show-toplevel 2>/dev/null); then
    rel=$(realpath -m --relative-to="$top" "$OUT")
    if ! git -C "$top" check-ignore -q "$rel/ca-key.pem"; then
        echo "make-certs: $OUT is inside the git work tree $top and not ignored: the keys" \
            "would be committed. Choose a folder outside it, or add it to .gitignore." >&2
        exit 1
    fi
fi

mkdir -p "$OUT"
umask 077

names=(localhost "$(hostname)")
ips=(127.0.0.1)
for a in $(hostname -I 2>/dev/null || true); do ips+=("$a"); done
for extra in "$@"; do
    if [[ $extra =~ ^[0-9.]+$ ]]; then ips+=("$extra"); else names+=("$extra"); fi
done
san=""
for n in "${names[@]}"; do san+="DNS:$n,"; done
for i in "${ips[@]}"; do san+="IP:$i,"; done
san=${san%,}

openssl req -x509 -newkey rsa:2048 -nodes -days "$DAYS" -subj "/CN=elmscale cluster CA" \
    -keyout "$OUT/ca-key.pem" -out "$OUT/ca.pem" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=elmscale node" \
    -keyout "$OUT/node-key.pem" -out "$OUT/node.csr" 2>/dev/null
printf "subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n" "$san" >"$OUT/ext.cnf"
openssl x509 -req -in "$OUT/node.csr" -CA "$OUT/ca.pem" -CAkey "$OUT/ca-key.pem" \
    -CAcreateserial -days "$DAYS" -extfile "$OUT/ext.cnf" -out "$OUT/node.pem" 2>/dev/null
rm -f "$OUT/node.csr" "$OUT/ext.cnf" "$OUT/ca.srl"
chmod 644 "$OUT/ca.pem" "$OUT/node.pem"
echo "certificates in $OUT for ${san//,/ }"
