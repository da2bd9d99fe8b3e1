"""Configuration of the tiny Dream-style test model (field names as in Dream's ``configuration_dream.py``, Qwen2's)."""

from transformers import PretrainedConfig


class DreamConfig(PretrainedConfig):
    model_type = "Dream"

    def __init__(self, vocab_size=400, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, rope_theta=10000.0,
                 rms_norm_eps=1e-6, mask_token_id=None, initializer_range=0.02, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.max_position_embeddings = max_position_embeddings
        self.rope_theta = rope_theta
        self.rms_norm_eps = rms_norm_eps
        self.mask_token_id = mask_token_id
        self.initializer_range = initializer_range
        kwargs["tie_word_embeddings"] = False
        super().__init__(**kwargs)
