#!/usr/bin/env bash
# The object-store tests against a real S3-compatible server: moto's server (PyPI `moto[server]`,
# installed once into ~/.cache/gauge-s3-venv) on a loopback port, a bucket made with boto3, then
# `cargo test --test object_store -- --ignored` with the AWS_* variables pointing at it.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="$HOME/.cache/gauge-s3-venv"
test -x "$venv/bin/moto_server" || { python3 -m venv "$venv" && "$venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]==5.*"; }
port=${GAUGE_S3_PORT:-9199}
log=$(mktemp)
"$venv/bin/moto_server" -H 127.0.0.1 -p "$port" > "$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 60); do curl -sf "http://127.0.0.1:$port/" > /dev/null 2>&1 && break; sleep 0.5; done
python3 scripts/loopback_check.py "$pid" >&2  # the S3 server listens on loopback only
export AWS_ENDPOINT="http://127.0.0.1:$port" AWS_ACCESS_KEY_ID=gauge AWS_SECRET_ACCESS_KEY=gauge AWS_REGION=us-east-1 AWS_ALLOW_HTTP=true
"$venv/bin/python" -c "import boto3; boto3.client('s3', endpoint_url='$AWS_ENDPOINT', region_name='us-east-1', aws_access_key_id='gauge', aws_secret_access_key='gauge').create_bucket(Bucket='gauge')"
GAUGE_S3_URL="s3://gauge/test-$(date +%s)" cargo test --release --test object_store -- --include-ignored
