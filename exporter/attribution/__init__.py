"""Ray attribution: which Ray node, job, worker, actor and task holds and uses each device."""
