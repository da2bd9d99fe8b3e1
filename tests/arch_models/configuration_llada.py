"""Configuration of the tiny LLaDA-style test model (field names as in LLaDA's own ``configuration_llada.py``)."""

from transformers import PretrainedConfig


class LLaDAConfig(PretrainedConfig):
    model_type = "llada"

    def __init__(self, d_model=32, n_heads=4, n_layers=2, mlp_hidden_size=64, vocab_size=400, embedding_size=None,
                 max_sequence_length=128, rope_theta=10000.0, rms_norm_eps=1e-5, mask_token_id=None,
                 initializer_range=0.02, **kwargs):
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_layers = n_layers
        self.mlp_hidden_size = mlp_hidden_size
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size or vocab_size  # LLaDA pads its embedding table past the tokenizer
        self.max_sequence_length = max_sequence_length
        self.rope_theta = rope_theta
        self.rms_norm_eps = rms_norm_eps
        self.mask_token_id = mask_token_id
        self.initializer_range = initializer_range
        kwargs["tie_word_embeddings"] = False  # LLaDA: weight_tying false, a separate output layer ff_out
        super().__init__(**kwargs)
