#!/usr/bin/env bash
# Packs a root filesystem directory into a one-layer OCI image archive without
# a container engine: an OCI image layout (oci-layout, index.json,
# blobs/sha256/...) in one tar, which `ctr images import`, crane, skopeo,
# podman and `docker load` (25+) read. hack/image.sh, hack/agent-image.sh and
# e2e/hack/pause-image.sh pack with it.
#
# Usage: oci-pack.sh ROOTFS OUT --name NAME --ref REF [options]
# (every option also takes the form --opt=VALUE)
#   ROOTFS               the image's files, exactly as they are (modes kept;
#                        owners become 0:0, every mtime SOURCE_DATE_EPOCH)
#   OUT                  the archive to write (its directory is created)
#   --name NAME          io.containerd.image.name of the index entry, the name
#                        `ctr images import` stores the image under, e.g.
#                        ghcr.io/acme/triage-bot:demo
#   --ref REF            org.opencontainers.image.ref.name (the tag, e.g. demo)
#   --user U             config User (e.g. 65532:65532)
#   --env K=V            config Env, repeatable, in order
#   --entrypoint ARG     one element of config Entrypoint, repeatable
#   --cmd ARG            one element of config Cmd, repeatable
#   --workdir DIR        config WorkingDir
#   --label K=V          a config label that is also a manifest annotation
#                        (as the org.opencontainers.image.* keys should be),
#                        repeatable, in order
#   --annotation K=V     a manifest annotation only, repeatable
#   --created-by TEXT    the history entry's created_by (default: oci-pack.sh)
#   --epoch SECONDS      mtime of every file and the "created" time
#                        (default: $SOURCE_DATE_EPOCH; one of them is required)
#   --arch ARCH          config architecture and index platform (default amd64)
#   --digest-name        a second index entry for the same manifest, named
#                        REPO@sha256:<manifest digest> (NAME without its tag):
#                        `ctr images import` then also stores the digest
#                        reference, which is the name containerd's CRI looks
#                        up for a Pod that pins `image: REPO@sha256:...`
#                        (a CRI pull stores both names the same way)
# GZIP_LEVEL (default 9) trades size for time.
#
# Prints two lines: OUT, then the manifest digest sha256:<hex>, which is the
# digest of the index entry, the target containerd records for the imported
# image and the digest a Pod pins (`REPO@sha256:<hex>`). Same inputs, same
# bytes: the layer tar is sorted, owner 0:0, fixed mtime, no atime/ctime;
# gzip -n; JSON written in a fixed key order.
set -euo pipefail
die() { printf 'oci-pack: ERROR: %s\n' "$*" >&2; exit 1; }

# A JSON string literal (quotes included). Control characters other than tab,
# newline and carriage return are refused rather than escaped.
json_str() {
  local s="$1"
  local t="${s//[$'\t\n\r']/}"
  [[ "$t" != *[[:cntrl:]]* ]] || die "control character in ${s@Q}"
  s="${s//\\/\\\\}"
  s="${s//\"/\\\"}"
  s="${s//$'\t'/\\t}"
  s="${s//$'\n'/\\n}"
  s="${s//$'\r'/\\r}"
  printf '"%s"' "$s"
}
# A JSON array of strings from the arguments.
json_list() {
  local out="" v
  for v in "$@"; do
    out="${out:+$out,}$(json_str "$v")"
  done
  printf '[%s]' "$out"
}
# JSON object members "k":"v",... from K=V arguments (no braces).
json_members() {
  local out="" kv
  for kv in "$@"; do
    case "$kv" in *=*) ;; *) die "not K=V: $kv" ;; esac
    out="${out:+$out,}$(json_str "${kv%%=*}"):$(json_str "${kv#*=}")"
  done
  printf '%s' "$out"
}

[ "$#" -ge 2 ] || die "usage: oci-pack.sh ROOTFS OUT --name NAME --ref REF [--user U] [--env K=V]... [--entrypoint ARG]... [--cmd ARG]... [--workdir DIR] [--label K=V]... [--annotation K=V]... [--created-by TEXT] [--epoch SECONDS] [--arch ARCH] [--digest-name]"
rootfs="$1" out="$2"
shift 2
name="" ref="" user="" workdir="" created_by="oci-pack.sh" epoch="${SOURCE_DATE_EPOCH:-}" arch=amd64 digest_name=0
envs=() entrypoint=() cmd=() labels=() annotations=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    --digest-name) digest_name=1; shift; continue ;;
    --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;   # --opt=value
  esac
  [ "$#" -ge 2 ] || die "$1 needs a value"
  case "$1" in
    --name) name="$2" ;;
    --ref) ref="$2" ;;
    --user) user="$2" ;;
    --env) envs+=("$2") ;;
    --entrypoint) entrypoint+=("$2") ;;
    --cmd) cmd+=("$2") ;;
    --workdir) workdir="$2" ;;
    --label) labels+=("$2") ;;
    --annotation) annotations+=("$2") ;;
    --created-by) created_by="$2" ;;
    --epoch) epoch="$2" ;;
    --arch) arch="$2" ;;
    *) die "unknown option $1" ;;
  esac
  shift 2
done
[ -d "$rootfs" ] || die "ROOTFS $rootfs is not a directory"
[ -n "$name" ] || die "--name is required"
[ -n "$ref" ] || die "--ref is required"
case "$epoch" in ''|*[!0-9]*) die "--epoch or SOURCE_DATE_EPOCH must be whole seconds, got '${epoch}'" ;; esac
# Checked here, in this shell: json_str and json_members run in command
# substitutions, whose failure an assignment would not always pass on.
for v in "$name" "$ref" "$user" "$workdir" "$created_by" "$arch" "${envs[@]}" "${entrypoint[@]}" "${cmd[@]}" "${labels[@]}" "${annotations[@]}"; do
  t="${v//[$'\t\n\r']/}"
  [[ "$t" != *[[:cntrl:]]* ]] || die "control character in ${v@Q}"
done
for kv in "${labels[@]}" "${annotations[@]}"; do
  case "$kv" in ?*=*) ;; *) die "a label or annotation is not K=V: $kv" ;; esac
done
level="${GZIP_LEVEL:-9}"
created="$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)"

stage="$(mktemp -d)"
trap 'rm -rf "$stage" "${tmp:-}"' EXIT
layout="$stage/layout"
mkdir -p "$layout/blobs/sha256"
# File capabilities (security.capability) travel in the layer; no other
# extended attribute does (they would make the layer depend on the host).
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
  --xattrs --xattrs-include=security.capability \
  -C "$rootfs" -cf "$stage/layer.tar" .
diff_id="$(sha256sum "$stage/layer.tar" | cut -d' ' -f1)"
gzip -n "-$level" -c "$stage/layer.tar" >"$stage/layer.tar.gz"
rm "$stage/layer.tar"
layer_digest="$(sha256sum "$stage/layer.tar.gz" | cut -d' ' -f1)"
layer_size="$(stat -c %s "$stage/layer.tar.gz")"
mv "$stage/layer.tar.gz" "$layout/blobs/sha256/$layer_digest"

# Config: the fields given, in the order Docker writes them.
fields=""
[ -n "$user" ] && fields="$fields,\"User\":$(json_str "$user")"
[ "${#envs[@]}" -gt 0 ] && fields="$fields,\"Env\":$(json_list "${envs[@]}")"
[ "${#entrypoint[@]}" -gt 0 ] && fields="$fields,\"Entrypoint\":$(json_list "${entrypoint[@]}")"
[ "${#cmd[@]}" -gt 0 ] && fields="$fields,\"Cmd\":$(json_list "${cmd[@]}")"
[ -n "$workdir" ] && fields="$fields,\"WorkingDir\":$(json_str "$workdir")"
[ "${#labels[@]}" -gt 0 ] && fields="$fields,\"Labels\":{$(json_members "${labels[@]}")}"
config="{\"architecture\":$(json_str "$arch"),\"os\":\"linux\",\"created\":\"$created\",\"config\":{${fields#,}},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:$diff_id\"]},\"history\":[{\"created\":\"$created\",\"created_by\":$(json_str "$created_by")}]}"
printf '%s' "$config" >"$stage/config.json"
config_digest="$(sha256sum "$stage/config.json" | cut -d' ' -f1)"
config_size="$(stat -c %s "$stage/config.json")"
mv "$stage/config.json" "$layout/blobs/sha256/$config_digest"

manifest_annotations="$(json_members "${labels[@]}" "${annotations[@]}")"
[ -z "$manifest_annotations" ] || manifest_annotations=",\"annotations\":{$manifest_annotations}"
manifest="{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"sha256:$config_digest\",\"size\":$config_size},\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"sha256:$layer_digest\",\"size\":$layer_size}]$manifest_annotations}"
printf '%s' "$manifest" >"$stage/manifest.json"
manifest_digest="$(sha256sum "$stage/manifest.json" | cut -d' ' -f1)"
manifest_size="$(stat -c %s "$stage/manifest.json")"
mv "$stage/manifest.json" "$layout/blobs/sha256/$manifest_digest"

# The index entry's digest is the manifest's: what `ctr images import` records
# as the image's target.
entry() {
  printf '{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{%s},"platform":{"architecture":%s,"os":"linux"}}' \
    "$manifest_digest" "$manifest_size" "$1" "$(json_str "$arch")"
}
entries="$(entry "\"org.opencontainers.image.ref.name\":$(json_str "$ref"),\"io.containerd.image.name\":$(json_str "$name")")"
if [ "$digest_name" = 1 ]; then
  repo="$name"
  case "${name##*/}" in *:*) repo="${name%:*}" ;; esac
  entries="$entries,$(entry "\"io.containerd.image.name\":$(json_str "$repo@sha256:$manifest_digest")")"
fi
printf '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[%s]}' "$entries" >"$layout/index.json"

# Written beside OUT, then renamed: a reader (or a concurrent run writing the
# same bytes) never sees half an archive.
mkdir -p "$(dirname "$out")"
tmp="$(mktemp "$(dirname "$out")/.oci-pack.XXXXXX")"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -C "$layout" -cf "$tmp" .
chmod 0644 "$tmp"
mv -f "$tmp" "$out"
printf '%s\n' "$out" "sha256:$manifest_digest"
