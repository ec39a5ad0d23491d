"""``python -m spark_backend.session``: warm a session, so its JVM writes the class-data
archive (:mod:`spark_backend.session.jvm_start`) as this process exits."""

from spark_backend.session.jvm_start import cache_dir
from spark_backend.session.session import warm_session

warm_session()
print(f"class-data archive (written as this process exits): {cache_dir()}")
