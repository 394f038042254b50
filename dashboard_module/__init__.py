"""The Accelerators tab: cluster aggregation of every agent's snapshot, its JSON API and the
built frontend, served inside Ray's dashboard (opt-in, RAY_ACCEL_DASHBOARD=1) or standalone
(`ray-accel dashboard`). Kept free of imports: Ray's dashboard imports it at start-up.
"""
