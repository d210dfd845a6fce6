"""Bytes autograd saves per layer and token for tiny configs of each transformers family on
CUDA (bf16 autocast, SDPA), and the CPU time per dispatched aten op: writes $OUT/r.json (kept as
benchmarks/measured/h200-2026-11-26/saved_per_layer.json). The same measurement as
tests/test_frameworks.py's on CPU, on the GPU the profile prices.

    OUT=. python3 benchmarks/hf_saved_per_layer.py      # on a CUDA GPU

Compacted to fit the device tool's 2,000-character command: the code that ran, verbatim below.
"""
import torch,transformers as T,json,os,time
from torch.utils._python_dispatch import TorchDispatchMode as M
B=torch.bfloat16;R={}
C=dict(llama=("LlamaConfig",dict(hidden_size=256,intermediate_size=704,num_attention_heads=8,num_key_value_heads=2)),
qwen3=("Qwen3Config",dict(hidden_size=256,intermediate_size=704,num_attention_heads=8,num_key_value_heads=2,head_dim=48)),
gg=("Gemma3TextConfig",dict(hidden_size=256,intermediate_size=704,num_attention_heads=4,num_key_value_heads=1,head_dim=96,sliding_window=4096)),
gs=("Gemma3TextConfig",dict(hidden_size=256,intermediate_size=704,num_attention_heads=4,num_key_value_heads=1,head_dim=96,sliding_window=16,sliding_window_pattern=1000)),
opt=("OPTConfig",dict(hidden_size=256,ffn_dim=704,num_attention_heads=8,word_embed_proj_dim=256,dropout=0.)),
optd=("OPTConfig",dict(hidden_size=256,ffn_dim=704,num_attention_heads=8,word_embed_proj_dim=256,dropout=.1)),
phi3=("Phi3Config",dict(hidden_size=256,intermediate_size=704,num_attention_heads=8,num_key_value_heads=2,pad_token_id=0)),
nemo=("NemotronConfig",dict(hidden_size=256,intermediate_size=704,num_attention_heads=8,num_key_value_heads=2,partial_rotary_factor=.5,pad_token_id=0,bos_token_id=1,eos_token_id=2)),
gpt2=("GPT2Config",dict(n_embd=256,n_head=8,resid_pdrop=0.,embd_pdrop=0.,attn_pdrop=0.,n_positions=4096)),
mw=("MistralConfig",dict(hidden_size=256,intermediate_size=704,num_attention_heads=8,num_key_value_heads=2,sliding_window=100)))
def mk(c,k,L):
 f=getattr(T,c)(num_hidden_layers=L,vocab_size=1000,max_position_embeddings=4096,**k)
 with torch.device('cuda'):m=T.AutoModelForCausalLM.from_config(f,attn_implementation='sdpa')
 m.train();return m
def sv(m,ids):
 P={p.data_ptr() for p in m.parameters()};S={};H={tuple(p.shape) for p in m.parameters()};H|={s[::-1] for s in H}
 def pk(t):
  if t.data_ptr() not in P and not(t.dim()==2 and t.dtype==B and tuple(t.shape) in H):S[t.untyped_storage().data_ptr()]=t.untyped_storage().nbytes()
  return t
 with torch.autograd.graph.saved_tensors_hooks(pk,lambda t:t),torch.autocast('cuda',dtype=B):m(input_ids=ids,labels=ids)
 return sum(S.values())
ids=torch.randint(0,1000,(2,100),device='cuda')
for n,(c,k) in C.items():
 try:a=sv(mk(c,k,2),ids);b=sv(mk(c,k,4),ids);R[n]=(b-a)/400
 except Exception as e:R[n]=str(e)[:200]
class N(M):
 n=0
 def __torch_dispatch__(s,f,t,a=(),k=None):s.n+=1;return f(*a,**(k or {}))
m=mk(*C['llama'],8);x=torch.randint(0,1000,(1,64),device='cuda')
def st():
 with torch.autocast('cuda',dtype=B):l=m(input_ids=x,labels=x).loss
 l.backward()
n=N()
with n:st()
for _ in range(3):st()
torch.cuda.synchronize();t=time.perf_counter()
for _ in range(10):st()
torch.cuda.synchronize();R['us_per_op']=(time.perf_counter()-t)/10/n.n*1e6;R['ops']=n.n
open(os.environ['OUT']+'/r.json','w').write(json.dumps(R))
