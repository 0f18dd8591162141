#!/usr/bin/env bash
# The PKI of the real-node cluster, as kubeadm lays it out (docs/testing.md):
#   ca.crt/ca.key                  the cluster CA (clients, serving certificates)
#   apiserver.crt/.key             kube-apiserver's serving certificate for the node
#                                  address, the first Service IP and the
#                                  kubernetes.default.svc names pods use
#   apiserver-kubelet-client.crt   the API server's client certificate towards the
#                                  kubelet (logs, exec, port-forward), group system:masters
#   kubelet.crt/.key               the kubelet's serving certificate for the node address
#                                  (the API server checks it: --kubelet-certificate-authority)
#   sa.key/sa.pub                  ServiceAccount token signing (ECDSA P-256)
#
# Usage: node-pki.sh DIR NODE_IP SERVICE_IP NODE_NAME
set -euo pipefail
[ "$#" -eq 4 ] || { echo "usage: node-pki.sh DIR NODE_IP SERVICE_IP NODE_NAME" >&2; exit 2; }
dir="$1" node_ip="$2" service_ip="$3" node_name="$4"
mkdir -p "$dir"
cd "$dir"

key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1" 2>/dev/null; }

# sign NAME SUBJECT EXTENSIONS: a certificate for NAME.key signed by the CA.
sign() {
  local name="$1" subject="$2" ext="$3"
  key "$name.key"
  openssl req -new -key "$name.key" -subj "$subject" -out "$name.csr" 2>/dev/null
  printf '%s\n' "$ext" >"$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
    -days 2 -sha256 -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

key ca.key
openssl req -x509 -new -key ca.key -subj "/CN=agentgate-e2e-ca" -days 2 -sha256 \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -out ca.crt 2>/dev/null

server="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth"
client="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"

sign apiserver "/CN=kube-apiserver" "$server
subjectAltName=IP:$node_ip,IP:$service_ip,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost"
sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client"
sign kubelet "/O=system:nodes/CN=system:node:$node_name" "$server
subjectAltName=IP:$node_ip,DNS:$node_name"

key sa.key
openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
chmod 0600 ./*.key
