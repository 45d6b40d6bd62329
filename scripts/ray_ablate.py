#!/usr/bin/env python3
"""Runs a gauge pipeline on a Ray cluster: `just ablate-ray PIPELINE`.

`pipeline-dag PIPELINE` (Rust, the same chain `evaluate` builds) lists every distinct stage
run once — extract, chunk, embed (one task per shard where a config sets `embed_shards`),
raptor, index — each with its config and the tasks it reads. Each becomes a Ray task that runs
the stage binary (`BIN ARGV… --config CONFIG.json --artifacts ROOT`) once its inputs exist;
embed tasks ask for `--gpus-per-embed` GPUs. Stages are content-addressed and commit
atomically, so a task whose node dies is simply run again (Ray's retries) and a rerun of the
whole launcher finishes as cache hits. The last step is `evaluate PIPELINE`, which finds every
artifact built and writes eval/<name>/ exactly as `just ablate` does.

Every node needs the same checkout (binaries under --bin). Artifacts live either in one root
every node mounts (`--artifacts`, NFS or local), or on an object store (`--remote s3://bucket/
prefix`, `gs://…`, `file://…`): then each task pulls the artifacts it reads into a node-local
mirror, runs the stage there, and pushes what it built, manifest last (`artifact-store`); the
head pulls everything before `evaluate`.

Without a cluster address (no --address, no RAY_ADDRESS, no cluster already running here) the
launcher starts a local one whose nodes announce themselves on 127.0.0.1 and checks that they
do: tasks, objects and heartbeats stay on loopback. A real cluster keeps the addresses its
nodes were started with (`ray start --head --node-ip-address=…`).
"""
import argparse
import ipaddress
import json
import os
import subprocess
import sys
import tempfile
import time

# Ray turns 127.0.0.1 into the machine's first interface address wherever it resolves "this
# node" (a bootstrap address, a node started without one); its switch for single-machine use
# (the default on macOS and Windows) makes that the loopback address instead. It is read when
# `ray` is imported, so it is set here, before the import, for a launcher that will use a local
# cluster; with a cluster address Ray's own resolution is kept.
LOOPBACK_ENV = ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def uses_local_cluster(argv, environ):
    """True when the launcher was given no cluster address (no --address, no RAY_ADDRESS)."""
    return not environ.get("RAY_ADDRESS") and not any(a == "--address" or a.startswith("--address=") for a in argv)


if __name__ == "__main__" and uses_local_cluster(sys.argv[1:], os.environ):
    os.environ.setdefault(*LOOPBACK_ENV)

import ray  # noqa: E402


LOOPBACK = "127.0.0.1"


def local_cluster(num_cpus=None, object_store_mib=512):
    """A Ray cluster on this machine whose head announces itself on 127.0.0.1 (Ray's default is
    the address of the machine's first network interface). Add worker nodes with
    `cluster.add_node(node_ip_address=LOOPBACK, …)`; the processes stop when Python exits."""
    from ray.cluster_utils import Cluster
    return Cluster(initialize_head=True, head_node_args={
        "node_ip_address": LOOPBACK,
        "num_cpus": num_cpus or os.cpu_count(),
        "object_store_memory": object_store_mib * 1024 * 1024,
    })


def assert_loopback_nodes():
    """Fails unless every live node of the connected cluster has an address in 127.0.0.0/8;
    returns the addresses."""
    addrs = [n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]]
    outside = [a for a in addrs if not ipaddress.ip_address(a).is_loopback]
    if outside:
        raise RuntimeError(f"Ray nodes on {', '.join(outside)}, outside loopback: a local cluster must announce 127.0.0.1")
    return addrs


def run_stage(bin_dir, workdir, artifacts, remote, task, *deps):
    """Runs one stage; returns the artifact directory it printed last (with `remote`: the
    artifact's `stage/fingerprint` on the object store)."""
    store = os.path.join(bin_dir, "artifact-store")
    if remote:
        # A node-local mirror of the remote root.
        artifacts = os.path.join(artifacts, ray.get_runtime_context().get_node_id()[:12])
        deps = [subprocess.run([store, "pull", remote, d, "--into", artifacts], capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1] for d in deps]
    outputs = dict(zip(task["needs"], deps))
    argv = [outputs[a[len("@task:"):]] if a.startswith("@task:") else a for a in task["argv"]]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(task["config"], f)
        config = f.name
    cmd = [os.path.join(bin_dir, task["bin"]), *argv, "--config", config, "--artifacts", artifacts]
    env = dict(os.environ, GAUGE_NO_PROGRESS="1")
    started = time.time()
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, env=env)
    os.unlink(config)
    if proc.returncode != 0:
        raise RuntimeError(f"{task['id']} ({task['stage']}) failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    out = proc.stdout.strip().splitlines()[-1]
    if remote:
        out = subprocess.run([store, "push", out, remote], capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    print(f"ray-ablate: {task['id']} {task['stage']}{' ' + task['shard'] if task.get('shard') else ''} → {out} ({time.time() - started:.1f} s on {ray.util.get_node_ip_address()})", file=sys.stderr)
    return out


def launch(pipeline, bin_dir, artifacts, eval_dir, workdir, gpus_per_embed=0.0, retries=3, remote=None):
    """Runs the DAG of `pipeline` on the connected Ray cluster, then evaluates; returns the
    evaluation artifact directory. With `remote` (an object-store URL), `artifacts` is the
    folder of the node-local mirrors, and the head's evaluation reads its own mirror."""
    dag = json.loads(subprocess.run([os.path.join(bin_dir, "pipeline-dag"), pipeline], cwd=workdir, capture_output=True, text=True, check=True).stdout)
    stage_task = ray.remote(max_retries=retries, retry_exceptions=True)(run_stage)
    refs = {}
    for task in dag["tasks"]:
        opts = {"num_cpus": 1}
        if task["stage"] == "embed" and gpus_per_embed:
            opts["num_gpus"] = gpus_per_embed
        deps = [refs[n] for n in task["needs"]]
        refs[task["id"]] = stage_task.options(**opts, name=f"{task['id']}-{task['stage']}").remote(bin_dir, workdir, artifacts, remote, task, *deps)
    # Wait for every index (and so everything upstream), surfacing the first failure.
    indexes = [refs[i["index"][len("@task:"):]] for i in dag["indexes"]]
    ray.get(indexes)
    print(f"ray-ablate: {len(dag['tasks'])} stage tasks done; evaluating", file=sys.stderr)
    if remote:
        artifacts = os.path.join(artifacts, "head")
        names = ray.get([refs[t["id"]] for t in dag["tasks"]])
        subprocess.run([os.path.join(bin_dir, "artifact-store"), "pull", remote, *names, "--into", artifacts], capture_output=True, text=True, check=True)
    cmd = [os.path.join(bin_dir, "evaluate"), *dag["evaluate"]["argv"], "--artifacts", artifacts, "--eval-dir", eval_dir]
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, env=dict(os.environ, GAUGE_NO_PROGRESS="1"))
    if proc.returncode != 0:
        raise RuntimeError(f"evaluate failed:\n{proc.stderr[-2000:]}")
    return proc.stdout.strip().splitlines()[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pipeline", nargs="?", default="pipelines/fra.toml")
    ap.add_argument("--address", default=os.environ.get("RAY_ADDRESS", "auto"), help="Ray cluster address (default: RAY_ADDRESS, else a running local cluster, else a new local one on 127.0.0.1)")
    ap.add_argument("--bin", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/gauge-target")), "release"))
    ap.add_argument("--artifacts", default="artifacts")
    ap.add_argument("--eval-dir", default="eval")
    ap.add_argument("--gpus-per-embed", type=float, default=0.0)
    ap.add_argument("--remote", help="object-store artifact root (s3://bucket/prefix, gs://…, file://…); --artifacts then holds the node-local mirrors")
    a = ap.parse_args()
    workdir = os.getcwd()
    try:
        ray.init(address=a.address, log_to_driver=True)
    except ConnectionError:
        if a.address != "auto":
            raise
        cluster = local_cluster()  # noqa: F841 (kept alive until exit)
        ray.init(address=cluster.address, log_to_driver=True)
        print(f"ray-ablate: started a local cluster on {', '.join(assert_loopback_nodes())}", file=sys.stderr)
    print(launch(a.pipeline, os.path.abspath(a.bin), os.path.abspath(a.artifacts), os.path.abspath(a.eval_dir), workdir, a.gpus_per_embed, remote=a.remote))


if __name__ == "__main__":
    main()
