#!/usr/bin/env bash
# Multi-GPU / multi-node evaluation with torchrun (gloo is used automatically on CPU-only machines).
#   bash tools/dist_test.sh CONFIG CHECKPOINT GPUS [extra args for tools/test.py]
# Multi-node: NNODES=2 NODE_RANK=0|1 MASTER_ADDR=host PORT=29500 bash tools/dist_test.sh ...
# A stalled rank ends the run after env_cfg.dist_cfg.timeout seconds (--cfg-options env_cfg.dist_cfg.timeout=600).
CONFIG=$1
CHECKPOINT=$2
GPUS=$3
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-"127.0.0.1"}

PYTHONPATH="$(dirname "$0")/..":${PYTHONPATH:-} \
python -m torch.distributed.run \
    --nnodes=$NNODES \
    --node_rank=$NODE_RANK \
    --master_addr=$MASTER_ADDR \
    --nproc_per_node=$GPUS \
    --master_port=$PORT \
    "$(dirname "$0")/test.py" \
    "$CONFIG" \
    "$CHECKPOINT" \
    --launcher pytorch \
    "${@:4}"
