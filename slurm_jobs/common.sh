# shellcheck shell=bash
# Shared body of the sbatch scripts in slurm_jobs/. Sourced, never run: it only defines
# functions; a job script calls `scalescope_job "$@"`.
#
# Settings (environment of `sbatch`, which exports it to the job; nothing here is edited):
#   SCALESCOPE_CONFIG     training config            (default configs/spiral.yaml)
#   SCALESCOPE_CLUSTER    cluster profile            (default configs/clusters/local.yaml)
#   SCALESCOPE_OVERRIDES  extra key=value overrides, separated by spaces
#   SCALESCOPE_PYTHON     python to run              (default: see scalescope_python)
#   MASTER_PORT           rendezvous port            (default: see scalescope_master_port)
# Arguments after the script name are more key=value overrides.
# Partition, account, time, nodes, tasks and GPUs per node are sbatch options (-p, -A, -t,
# -N, --ntasks-per-node, --gpus-per-node) or SBATCH_PARTITION / SBATCH_ACCOUNT /
# SBATCH_TIMELIMIT. So are whole nodes: where a partition shares nodes between jobs, pass
# --exclusive (or SBATCH_EXCLUSIVE=1), as a sweep does for a profile with `exclusive: true`;
# another job on a run's node is in its timings (docs/cluster.md).

scalescope_fail() {
    echo "scalescope job: error: $*" >&2
    exit 2
}

# Print the `setup: |` literal block of a cluster profile with its indentation removed,
# without Python (the venv is not active yet). YAML rules kept: the block ends at the first
# non-blank line indented less than its first line; blank lines inside are kept, trailing
# ones dropped. Equal to what scalescope.launch.cluster.load_profile reads (tests/golden/ checks it).
scalescope_setup_block() {
    awk '
        !inblock && /^setup:[ \t]*\|[-+]?[ \t]*$/ { inblock = 1; indent = -1; blank = 0; next }
        !inblock { next }
        /^[ \t]*$/ { blank++; next }
        {
            match($0, /^ */)
            if (indent < 0) indent = RLENGTH
            if (indent == 0 || RLENGTH < indent) exit
            for (; blank > 0; blank--) print ""
            print substr($0, indent + 1)
        }
    ' "$1"
}

# The profile's `name:` (a plain scalar, optionally quoted), which runs record as their
# cluster. Equal to what scalescope.launch.cluster.load_profile reads (tests check it).
scalescope_profile_name() {
    awk '
        /^name:[ \t]*/ {
            sub(/^name:[ \t]*/, ""); sub(/[ \t]+#.*$/, ""); sub(/[ \t]+$/, "")
            if ($0 ~ /^".*"$/ || $0 ~ /^'"'"'.*'"'"'$/) $0 = substr($0, 2, length($0) - 2)
            print; exit
        }
    ' "$1"
}

# Tasks per node of this allocation; fails when nodes have different counts (Lightning
# needs the same number of devices on every node).
scalescope_tasks_per_node() {
    local tpn=${SLURM_NTASKS_PER_NODE:-}
    if [[ -z $tpn ]]; then
        local layout=${SLURM_TASKS_PER_NODE:-1}  # e.g. "4(x2)" or "2,1"
        if [[ $layout == *,* ]]; then
            scalescope_fail "tasks per node differ between nodes ($layout); submit with" \
                "--ntasks-per-node=N so that every node runs the same number of tasks"
        fi
        tpn=${layout%%(*}
    fi
    echo "$tpn"
}

# GPUs per node of this allocation (0 without GPUs). SLURM_GPUS_PER_NODE may carry a type.
scalescope_gpus_per_node() {
    local gpus=${SLURM_GPUS_ON_NODE:-${SLURM_GPUS_PER_NODE:-0}}
    gpus=${gpus##*:}
    echo "${gpus:-0}"
}

# One task per GPU: Lightning gives task SLURM_LOCALID the device cuda:SLURM_LOCALID.
scalescope_check_gpus() {
    local gpus tpn
    gpus=$(scalescope_gpus_per_node)
    tpn=$(scalescope_tasks_per_node)
    if [[ $gpus != 0 && $gpus != "$tpn" ]]; then
        scalescope_fail "$gpus GPUs per node but $tpn tasks per node; one task per GPU:" \
            "submit with --ntasks-per-node=$gpus --gpus-per-node=$gpus"
    fi
}

# Lightning's default MASTER_PORT, 15000 + the last 4 digits of the job id, is the same
# for two jobs whose ids share those digits: the second one's rendezvous fails when both
# have their first task on one node. Start from another range (below Linux's ephemeral
# ports, above Lightning's range), and skip ports that something on this node (the first
# of the allocation, where rank 0 listens) already holds.
scalescope_master_port() {
    if [[ -n ${MASTER_PORT:-} ]]; then
        echo "$MASTER_PORT"
        return
    fi
    local job=${SLURM_JOB_ID:-0} port i
    for ((i = 0; i < 64; i++)); do
        port=$((25000 + (job + i * 97) % 7000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return
        fi
    done
    echo $((25000 + job % 7000))
}

# The python that runs training: SCALESCOPE_PYTHON; else the one the setup block activated
# (venv or conda); else the repository's .venv; else python on PATH.
scalescope_python() {
    local repo=$1
    if [[ -n ${SCALESCOPE_PYTHON:-} ]]; then
        echo "$SCALESCOPE_PYTHON"
    elif [[ -n ${VIRTUAL_ENV:-} || -n ${CONDA_PREFIX:-} ]]; then
        command -v python || command -v python3
    elif [[ -x $repo/.venv/bin/python ]]; then
        echo "$repo/.venv/bin/python"
    else
        command -v python3 || command -v python
    fi
}

scalescope_job() {
    local repo=${SLURM_SUBMIT_DIR:?submit with sbatch from the repository root}
    cd "$repo" || scalescope_fail "cannot enter the submit dir $repo"
    : "${SCALESCOPE_CONFIG:=configs/spiral.yaml}"
    : "${SCALESCOPE_CLUSTER:=configs/clusters/local.yaml}"
    : "${SCALESCOPE_OVERRIDES:=}"
    [[ -f $SCALESCOPE_CLUSTER ]] || scalescope_fail "cluster profile not found:" \
        "$repo/$SCALESCOPE_CLUSTER (set SCALESCOPE_CLUSTER to a file in configs/clusters/)"

    local setup
    setup=$(scalescope_setup_block "$SCALESCOPE_CLUSTER")
    if [[ -n $setup ]]; then
        # Module and venv scripts often read unset variables: relax -u while they run.
        trap 'echo "scalescope job: error: the setup block of $SCALESCOPE_CLUSTER failed" \
            "(exit $?) at: $BASH_COMMAND" >&2' ERR
        set +u
        # shellcheck disable=SC1090
        source <(printf '%s\n' "$setup")
        set -u
        trap - ERR
    fi

    scalescope_check_gpus
    local python
    python=$(scalescope_python "$repo") || scalescope_fail "no python found after the setup block"
    "$python" -c "import scalescope" 2>/dev/null || scalescope_fail "$python cannot import" \
        "scalescope: activate its venv in the profile's setup block or set SCALESCOPE_PYTHON"
    MASTER_PORT=$(scalescope_master_port)
    export MASTER_PORT

    local overrides cluster
    cluster=$(scalescope_profile_name "$SCALESCOPE_CLUSTER")
    # The profile's name first: an explicit cluster=... override still wins.
    overrides=(${cluster:+"cluster=$cluster"})
    overrides+=("$@")
    export SCALESCOPE_OVERRIDES  # applied by scalescope train, which names it in errors

    local nodes=${SLURM_JOB_NUM_NODES:-1} tpn
    tpn=$(scalescope_tasks_per_node)
    echo "scalescope job ${SLURM_JOB_ID:-?}: $nodes node(s) (${SLURM_JOB_NODELIST:-?})," \
        "$tpn task(s) per node, world size $((nodes * tpn)), GPUs per node" \
        "$(scalescope_gpus_per_node)"
    echo "  config $SCALESCOPE_CONFIG, profile $SCALESCOPE_CLUSTER," \
        "overrides: ${SCALESCOPE_OVERRIDES:+$SCALESCOPE_OVERRIDES }${overrides[*]:-}"
    echo "  python $python, MASTER_ADDR=${MASTER_ADDR:-first node}, MASTER_PORT=$MASTER_PORT"

    # One task per device. If one task dies, srun ends the others instead of leaving them
    # blocked in a collective; its exit status becomes the job's.
    local status=0
    srun --kill-on-bad-exit=1 "$python" -m scalescope.train --config "$SCALESCOPE_CONFIG" \
        --env-overrides SCALESCOPE_OVERRIDES "${overrides[@]}" || status=$?
    echo "scalescope job ${SLURM_JOB_ID:-?}: training exited with status $status"
    return "$status"
}
