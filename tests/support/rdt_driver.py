"""A Ray driver that moves tensors between two actors with Ray Direct Transport (gloo).

Run as `python rdt_driver.py --address ADDR --out DIR`. It creates a producer
and a consumer actor (each holding one GPU of the raylet, simulated or not),
joins them in a gloo collective group, writes their identities to
DIR/identities.json, prints `rdt-ready`, then obeys commands on stdin:

- `stream N`: N healthy transfers, one after the other, 20 ms apart; prints `streamed`.
- `stall S`: blocks the consumer's `_ray_system` thread (where RDT receives run)
  for S seconds, then starts one transfer: the producer's send hangs until the
  block ends. Prints `stalled` once submitted and `unstalled` when it is done
  (or `stall-failed <error>` when Ray aborted it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import ray
import torch
from ray.experimental.collective import create_collective_group


def _identity(kind: str) -> dict:
    context = ray.get_runtime_context()
    return {"kind": kind, "pid": os.getpid(), "actor_id": context.get_actor_id(),
            "node_id": context.get_node_id(), "job_id": context.get_job_id(),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()]}


@ray.remote(num_gpus=1, num_cpus=0)
class Producer:
    def identity(self) -> dict:
        return _identity("producer")

    @ray.method(tensor_transport="gloo")
    def make(self, size: int) -> torch.Tensor:
        return torch.ones(size)


# The receiving side needs the `_ray_system` thread too, or its receives queue
# behind its own consuming task (which waits for them) and every transfer hangs.
@ray.remote(num_gpus=1, num_cpus=0, enable_tensor_transport=True)
class Consumer:
    def identity(self) -> dict:
        return _identity("consumer")

    def consume(self, tensor: torch.Tensor) -> float:
        return float(tensor.sum())


def _block(self, seconds: float) -> None:  # runs on the actor, as `__ray_call__`
    time.sleep(seconds)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    ray.init(address=args.address, logging_level="ERROR", log_to_driver=False)
    producer, consumer = Producer.remote(), Consumer.remote()
    create_collective_group([producer, consumer], backend="torch_gloo")
    identities = {"producer": ray.get(producer.identity.remote()),
                  "consumer": ray.get(consumer.identity.remote())}
    Path(args.out, "identities.json").write_text(json.dumps(identities))
    print("rdt-ready", flush=True)
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "stream":
            for _ in range(int(argument)):
                assert ray.get(consumer.consume.remote(producer.make.remote(1024))) == 1024
                time.sleep(0.02)
            print("streamed", flush=True)
        elif command == "stall":
            blocker = consumer.__ray_call__.options(concurrency_group="_ray_system").remote(
                _block, float(argument))
            time.sleep(1.5)  # the block is running (and well apart in time from the transfer)
            result = consumer.consume.remote(producer.make.remote(1024))
            print("stalled", flush=True)
            try:
                ray.get([blocker, result])
                print("unstalled", flush=True)
            except Exception as error:  # Ray aborted the transfer (actors killed)
                print(f"stall-failed {type(error).__name__}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
