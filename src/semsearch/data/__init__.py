"""Data layer: reading and writing the project's file formats, with errors that name file and line.

BEIR layout (corpus / queries / qrels), TREC runs and qrels, query-title pairs and click logs,
query-domain TSVs, and a catalog of the data sets under ../shared/data. Every reader streams
line by line and takes `skip_bad_lines`; every writer is atomic.
"""

from .beir import (
    BeirDataset,
    Corpus,
    Document,
    Fields,
    iter_corpus,
    iter_qrels,
    iter_queries,
    join_fields,
    load_corpus,
    load_qrels,
    load_queries,
    write_corpus,
    write_qrels,
    write_queries,
)
from .catalog import dataset_info, list_datasets, open_dataset
from .domains import (
    DomainTasks,
    LabelledQuery,
    binary_labels,
    domain_names,
    load_query_domains,
    normalise_split,
    open_domain_set,
)
from .errors import BadLinePolicy, DataFormatError, DataWarning
from .files import data_root
from .pairs import iter_clicks, iter_pairs, write_clicks, write_pairs
from .pools import query_pools
from .positives import pair_texts, positive_pairs
from .table import MAX_RECORD_BYTES, corpus_from_frame, load_table
from .training import EvalSet, TrainingData
from .trec import iter_run, ranked, read_run, write_run, write_trec_qrels

__all__ = [
    "BadLinePolicy",
    "BeirDataset",
    "Corpus",
    "DataFormatError",
    "DataWarning",
    "EvalSet",
    "TrainingData",
    "Document",
    "Fields",
    "MAX_RECORD_BYTES",
    "LabelledQuery",
    "binary_labels",
    "data_root",
    "dataset_info",
    "domain_names",
    "iter_clicks",
    "iter_corpus",
    "iter_pairs",
    "iter_qrels",
    "iter_queries",
    "iter_run",
    "join_fields",
    "list_datasets",
    "load_corpus",
    "load_table",
    "corpus_from_frame",
    "load_qrels",
    "load_queries",
    "load_query_domains",
    "DomainTasks",
    "open_domain_set",
    "normalise_split",
    "open_dataset",
    "pair_texts",
    "query_pools",
    "positive_pairs",
    "ranked",
    "read_run",
    "write_clicks",
    "write_corpus",
    "write_pairs",
    "write_qrels",
    "write_queries",
    "write_run",
    "write_trec_qrels",
]
