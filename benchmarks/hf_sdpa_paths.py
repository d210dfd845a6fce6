"""What transformers' SDPA path runs on a GPU and where a training step's memory peaks
(formulation/eager_layers.py and eager_memory.py): writes $OUT/r.json (kept as
benchmarks/measured/h200-2026-11-26/sdpa_paths.json, whose `keys` say what each field is).

    OUT=. python3 benchmarks/hf_sdpa_paths.py      # from the repository root, on a CUDA GPU

Torch and transformers only. Compacted to fit the device tool's 2,000-character command: this is
the code that ran, verbatim below this docstring (one lint comment added). Attention cases: SDPA called as
transformers' integrations/sdpa_attention.py calls it (no mask with is_causal and enable_gqa; or a
sliding-window layer's boolean (b, 1, s, s) mask with K and V repeated to all heads, as
masking_utils and repeat_kv make them). Step phases: benchmarks/hf_train_steps.py's step (fp32
weights, bf16 autocast, fused AdamW, zero_grad(set_to_none)) with torch.cuda's allocated-memory
counters read between its phases, on the third step.
"""
import torch,json,sys,time,os,statistics as st
Y=torch.cuda.synchronize
sys.path.insert(0,'benchmarks')
F=torch.nn.functional;C='cuda';B=torch.bfloat16;R={'env':[torch.__version__,list(torch._C._get_sdp_priority_order())],'att':[],'ph':[]}
O=os.environ['OUT']+'/r.json'
def sv():open(O,'w').write(json.dumps(R))
def tm(f,n=6):
 Y();t=[]
 for _ in range(n):
  a=torch.cuda.Event(enable_timing=1);b=torch.cuda.Event(enable_timing=1);a.record();f();b.record();Y();t.append(a.elapsed_time(b)/1e3)
 return st.median(t)
def att(nm,b,h,g,s,d,w):
 m=w is not None and s>=w;kh=h if m else g
 q=torch.randn(b,h,s,d,device=C,dtype=B,requires_grad=True);k=torch.randn(b,kh,s,d,device=C,dtype=B,requires_grad=True);v=torch.randn_like(k,requires_grad=True)
 M=None
 if m:i=torch.arange(s,device=C);M=((i[None]<=i[:,None])&(i[None]>i[:,None]-w))[None,None].expand(b,-1,s,s)
 kw=dict(attn_mask=M,is_causal=not m,scale=d**-.5,enable_gqa=(not m) and g!=h)
 r=dict(c=nm,ch=int(torch._fused_sdp_choice(q,k,v,M,0.,not m,scale=d**-.5,enable_gqa=kw['enable_gqa'])));S=[]
 def pk(t):S.append((list(t.shape),str(t.dtype),t.untyped_storage().nbytes()));return t
 with torch.autograd.graph.saved_tensors_hooks(pk,lambda t:t):o=F.scaled_dot_product_attention(q,k,v,**kw)
 r['sv']=S;gr=torch.randn_like(o);del o
 r['f']=tm(lambda:F.scaled_dot_product_attention(q,k,v,**kw));r['fb']=tm(lambda:F.scaled_dot_product_attention(q,k,v,**kw).backward(gr));return r
def ph(dr,s,mb,ck):
 from hf_train_steps import load_config
 from transformers import AutoModelForCausalLM as A
 c=load_config(dr,False)
 with torch.device(C):md=A.from_config(c,attn_implementation='sdpa',dtype=torch.float32)
 md.train()
 if ck:md.gradient_checkpointing_enable(gradient_checkpointing_kwargs={'use_reentrant':False})
 op=torch.optim.AdamW(md.parameters(),lr=1e-5,fused=True);ids=torch.randint(0,c.vocab_size,(mb,s),device=C);P={p.data_ptr() for p in md.parameters()};mem=torch.cuda.memory_allocated;pk=torch.cuda.max_memory_allocated;rs=torch.cuda.reset_peak_memory_stats
 for j in range(3):
  Y();rs();S={}
  def hk(t):
   if t.data_ptr() not in P:S[t.untyped_storage().data_ptr()]=t.untyped_storage().nbytes()  # noqa: B023
   return t
  with torch.autocast(C,dtype=B):
   if j==2 and not ck:
    with torch.autograd.graph.saved_tensors_hooks(hk,lambda t:t):l=md(input_ids=ids,labels=ids).loss
   else:l=md(input_ids=ids,labels=ids).loss
   Y();fe=mem()
  ae=mem();fp=pk();rs();l.backward();Y();bp=pk();be=mem();rs();op.step();Y();opk=pk();op.zero_grad(set_to_none=True)
 R['ph'].append(dict(c=dr,s=s,mb=mb,ck=ck,fp=fp,fe=fe,ae=ae,bp=bp,be=be,op=opk,res=torch.cuda.memory_reserved(),sv=sum(S.values())));del md,op;torch.cuda.empty_cache()
T=time.time();G='gemma-3-1b-it'
for a in [('gs',2,4,1,4096,256,512),('gg',2,4,1,4096,256,None),('gs32',1,4,1,32768,256,512),('gg32',1,4,1,32768,256,None),('ms',1,32,8,4096,128,4096),('mc',1,32,8,4096,128,None)]:
 try:R['att'].append(att(*a))
 except Exception as e:R['att'].append(dict(c=a[0],e=str(e)[:300]))
 torch.cuda.empty_cache();sv()
for a in [(G,2048,8,0),('Llama-3.2-3B',16384,1,1),('opt-1.3b',2048,4,0)]:
 if time.time()-T>150:break
 try:ph(*a)
 except Exception as e:R['ph'].append(dict(c=a[0],e=str(e)[:300]))
 torch.cuda.empty_cache();sv()
