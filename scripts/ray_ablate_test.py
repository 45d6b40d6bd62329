#!/usr/bin/env python3
"""`just test-ray`: the Ray launcher on a two-node local Ray cluster, with the worker node
killed mid-run, gives the evaluation a single-machine `evaluate` gives; a rerun is all cache
hits (no new artifact).

A small Markdown corpus and golden set are written to a temporary folder; the pipeline has a
hybrid baseline, a dense config embedding in 3 shards (`embed_shards = 3`) and a config with
other chunking, so the DAG shares extract, fans out embed shards and builds three indexes.
The cluster is Ray's own multi-node test harness (`ray.cluster_utils.Cluster`: a head and a
worker, each a real raylet with its own processes, on this machine), both nodes on 127.0.0.1:
the test fails if any node, or any node a task ran on, has an address outside 127.0.0.0/8.
"""
import glob
import hashlib
import ipaddress
import os
import subprocess
import sys
import tempfile
import threading
import time

import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # ray_ablate.LOOPBACK_ENV, before Ray is imported
import ray  # noqa: E402
import loopback_check  # noqa: E402
import ray_ablate  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/gauge-target")), "release")
SUBJECTS = ["Gate arms", "Flashing lights", "Crossing bells", "Track circuits", "Tank cars", "Bridge walkways"]
RULES = ["must be inspected every month and the result recorded", "shall be tested after any repair that affects their function", "need a written plan approved before work begins"]


def write_inputs(root):
    corpus = os.path.join(root, "corpus")
    os.makedirs(corpus)
    for i, s in enumerate(SUBJECTS):
        for j, r in enumerate(RULES):
            with open(os.path.join(corpus, f"doc{i}{j}.md"), "w") as f:
                f.write(f"# doc {i}{j}\n\n{s} {r}. Identifier ERA{i}{j}LA{100 + i * 5 + j}. " + " ".join(f"Clause {k} applies to {s.lower()}." for k in range(12)) + "\n")
    golden = [("q1", "When must gate arms be inspected?", "doc00.md"), ("q2", "Who approves a plan for bridge walkways?", "doc52.md"), ("q3", "ERA31LA116", "doc31.md"), ("q4", "testing flashing lights after repair", "doc11.md")]
    with open(os.path.join(root, "golden.jsonl"), "w") as f:
        for qid, q, src in golden:
            f.write(f'{{"qid": "{qid}", "question": "{q}", "gold": [{{"source": "{src}", "page": 1}}]}}\n')
    minilm = os.path.join(REPO, "models", "all-MiniLM-L6-v2")
    pipeline = os.path.join(root, "p.toml")
    with open(pipeline, "w") as f:
        f.write(f'''name = "ray"
corpus = "corpus"
golden = "golden.jsonl"
k = 5
resamples = 1000
[baseline]
name = "Hybrid"
chunk = {{ strategy = "page", filters = {{ min_chars = 0 }} }}
embed = {{ model = "{minilm}" }}
[[variants]]
name = "Vector, 3 embed shards"
embed_shards = 3
retrieval = {{ bm25 = false }}
[[variants]]
name = "Hybrid, 200-char chunks"
chunk = {{ strategy = "recursive", size = 200, overlap = 20, filters = {{ min_chars = 0 }} }}
''')
    return pipeline


@ray.remote(num_cpus=1)
def node_address():
    """The address of the node this task ran on."""
    return ray.util.get_node_ip_address()


def ray_listening_sockets():
    """(pid, address, port) of every TCP socket a Ray process on this machine listens on (GCS,
    raylets, object managers, dashboard, workers); fails if one is outside loopback."""
    pids = subprocess.run(["pgrep", "-f", "gcs_server|raylet|dashboard|ray::|default_worker"], capture_output=True, text=True).stdout.split()
    found = [(pid, addr, port) for pid in pids for addr, port in loopback_check.listening(pid)]
    outside = [f"{addr}:{port} (pid {pid})" for pid, addr, port in found if not loopback_check.is_loopback(addr)]
    assert found, "no listening Ray socket found: the check would prove nothing"
    assert not outside, f"Ray listens outside loopback: {', '.join(outside)}"
    return found


def artifact_dirs(root):
    return sorted(d for d in glob.glob(os.path.join(root, "*", "*")) if os.path.isdir(d) and not os.path.basename(d).startswith("."))


def digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def metrics_without_latency(path):
    t = pq.read_table(path).to_pylist()
    return sorted((r["config"], r["category"], r["metric"], r["n"], round(r["value"], 12)) for r in t if "latency" not in r["metric"])


def main():
    started = time.time()
    tmp = tempfile.mkdtemp(prefix="gauge-ray-")
    pipeline = write_inputs(tmp)
    ray_art, ray_eval = os.path.join(tmp, "ray-artifacts"), os.path.join(tmp, "ray-eval")

    cluster = ray_ablate.local_cluster(num_cpus=1, object_store_mib=150)
    worker = cluster.add_node(num_cpus=2, node_ip_address=ray_ablate.LOOPBACK)
    ray.init(address=cluster.address)
    nodes = ray_ablate.assert_loopback_nodes()
    assert len(nodes) == 2, ray.nodes()
    where = ray.get([node_address.remote() for _ in range(6)])
    assert all(ipaddress.ip_address(a).is_loopback for a in where), f"tasks ran on {where}, outside loopback"
    sockets = ray_listening_sockets()

    def kill_worker():
        # Once the first embed artifact has committed, the worker node dies; the tasks it was
        # running are retried on the node left (Ray's task retries).
        deadline = time.time() + 120
        while time.time() < deadline and not glob.glob(os.path.join(ray_art, "embed", "*", "manifest.json")):
            time.sleep(0.2)
        cluster.remove_node(worker, allow_graceful=False)
        print("ray-test: worker node killed", file=sys.stderr)

    killer = threading.Thread(target=kill_worker)
    killer.start()
    t0 = time.time()
    out = ray_ablate.launch(pipeline, BIN, ray_art, ray_eval, tmp)
    ray_seconds = time.time() - t0
    killer.join()
    print(f"ray-test: Ray run {ray_seconds:.1f} s → {out}", file=sys.stderr)

    # The same pipeline on one machine, in a fresh artifact root.
    one_art, one_eval = os.path.join(tmp, "one-artifacts"), os.path.join(tmp, "one-eval")
    subprocess.run([os.path.join(BIN, "evaluate"), pipeline, "--artifacts", one_art, "--eval-dir", one_eval], cwd=tmp, check=True, capture_output=True, env=dict(os.environ, GAUGE_NO_PROGRESS="1"))
    a, b = os.path.join(ray_eval, "ray"), os.path.join(one_eval, "ray")
    same = ["runs.parquet"] + sorted(os.path.relpath(p, a) for p in glob.glob(os.path.join(a, "trec", "*")))
    for f in same:
        assert digest(os.path.join(a, f)) == digest(os.path.join(b, f)), f"{f} differs between the Ray and the single-machine run"
    assert metrics_without_latency(os.path.join(a, "metrics.parquet")) == metrics_without_latency(os.path.join(b, "metrics.parquet")), "metrics differ"
    # The artifacts themselves: the same set of fingerprints (content-addressed).
    names = lambda root: sorted(os.path.relpath(d, root) for d in artifact_dirs(root))
    assert names(ray_art) == names(one_art), (names(ray_art), names(one_art))
    assert len(glob.glob(os.path.join(ray_art, "embed", "*", "manifest.json"))) == 3 + 2, "3 shards + 2 unsharded embeds"

    # Through an object store instead of a shared root: every task pulls its inputs into its
    # node's own mirror and pushes what it built; the results are the same.
    bucket = "file://" + os.path.join(tmp, "bucket")
    obj_eval = os.path.join(tmp, "obj-eval")
    ray_ablate.launch(pipeline, BIN, os.path.join(tmp, "mirrors"), obj_eval, tmp, remote=bucket)
    for f in same:
        assert digest(os.path.join(obj_eval, "ray", f)) == digest(os.path.join(b, f)), f"{f} differs through the object store"
    listed = subprocess.run([os.path.join(BIN, "artifact-store"), "ls", bucket], capture_output=True, text=True, check=True).stdout.split()
    assert sorted(listed) == [n for n in names(one_art) if not n.startswith("evaluate/")], (listed, names(one_art))

    # A rerun is all cache hits: no new artifact.
    before = artifact_dirs(ray_art)
    t0 = time.time()
    ray_ablate.launch(pipeline, BIN, ray_art, ray_eval, tmp)
    rerun = time.time() - t0
    assert artifact_dirs(ray_art) == before
    ray_ablate.assert_loopback_nodes()
    ray.shutdown()
    try:
        cluster.shutdown()
    except AttributeError:
        pass  # the killed node's handle has no processes left to stop
    print(f"ray-test: passed in {time.time() - started:.1f} s (nodes on {', '.join(sorted(set(nodes)))}, {len(sockets)} listening sockets on loopback; Ray run {ray_seconds:.1f} s with a worker killed, rerun {rerun:.1f} s, {len(same)} files byte-identical to the single-machine run)")


if __name__ == "__main__":
    main()
