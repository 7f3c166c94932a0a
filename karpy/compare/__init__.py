"""``karpy compare`` and ``karpy sweep``: many ``karpy simulate`` runs side by side.

* :mod:`.run`: one configuration simulated in process, and the metrics a row reports;
* :mod:`.variants`: sweep files, the well-known knobs and patches, the cross product;
* :mod:`.compare`: the side-by-side table of ``karpy compare``;
* :mod:`.sweep`: a sweep run on a process pool (or Ray, :mod:`.ray_backend`), streamed, resumable, with the
  Pareto front of cost against disruption;
* :mod:`.plots`: the figures of ``--plot``.
"""
