"""The launch side: what runs on the submitting machine.

* :mod:`.sweep_config` -- sweep files -> a validated plan of shapes and rounds;
* :mod:`.resources` -- what one job of a shape asks the scheduler for, checked;
* :mod:`.cluster` -- cluster profiles (configs/clusters/*.yaml);
* :mod:`.executor` -- submitit executors (Slurm or local) and the sbatch text;
* :mod:`.monitor` -- where each submitted job stands and what it returned;
* :mod:`.sweep` -- ``scalescope sweep``: plan, submit, watch, write ``sweep.json``;
* :mod:`.local_cluster` -- ``scalescope local-cluster``: a real two-node Slurm cluster here;
* :mod:`.local_cluster_conf` -- its state directory, ``cluster.json`` and slurm.conf;
* :mod:`.local_cluster_daemons` -- its processes: install, start, ask and stop them.
"""
