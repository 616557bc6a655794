"""The book's own code beside ours (Build a Reasoning Model (From Scratch), rasbt/reasoning-from-scratch):

    qwen3.py         its model, Qwen3, handwritten, loading Hugging Face weights from a local folder
    hf_tokenizer.py  its tokenizer, read from a Hugging Face tokenizer.json into a tiktoken Encoding
    math_grader.py   a grader of MATH answers as the book grades them, without sympy
    reference.py     the chapter's GRPO step as its scripts write it, and the papers' step, for reading beside
                     grpo.py; tests/test_reference.py holds grpo_step equal to each

docs/book_model.md says how to train the book's model with train.py.
"""
